"""Each limit and refusal of the pickle loader, tested on its own (issue 19.14).

A hand-made mutation run found guards whose removal no test noticed: the container budget
raised 1,000x, the deadline check inside the scans dropped (``loads`` checks the deadline
again after each pass, which hid it), ``max_long_bytes`` raised from 32 to 4,096, and
``find_class`` resolving globals (the opcode pre-scan refuses them first, so the second
layer was never exercised). Each test below fails with its mutant; the mutants are listed
in docs/threat-model.md.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import pickle
import pickletools
import sys
import time
from pathlib import Path

import pytest

from artifacts import safepickle
from artifacts.bounded import DEFAULT_LIMITS, Deadline, Limits, mapped
from artifacts.errors import ArtifactRejected
from tests.support.deadlines import ExpiresAfter

DEFAULT = safepickle.DEFAULT_PICKLE_LIMITS
MiB = 1 << 20


def _expired() -> Deadline:
    deadline = Deadline(0.0)
    time.sleep(0.01)
    return deadline


# --- the deadline inside each pass ------------------------------------------------------------


def test_the_opcode_scan_checks_the_deadline_as_it_goes():
    """``prescan`` alone, so no later check can stand in for the periodic one."""
    data = pickle.dumps(list(range(200_000)), protocol=4)  # ~400,000 opcodes
    assert safepickle.prescan(data, DEFAULT, Deadline(60)) > 65_536  # it does reach a check
    with pytest.raises(ArtifactRejected, match="time limit"):
        safepickle.prescan(data, DEFAULT, _expired())


def test_the_structure_walk_checks_the_deadline_as_it_goes():
    value = [[] for _ in range(70_000)]  # more containers than one check interval
    assert safepickle.check_structure(value, DEFAULT, Deadline(60)) == 70_001
    with pytest.raises(ArtifactRejected, match="time limit"):
        safepickle.check_structure(value, DEFAULT, _expired())


# --- the container budget ---------------------------------------------------------------------


def test_the_container_budget_is_enforced_at_its_boundary():
    limits = safepickle.PickleLimits(max_containers=1_000)
    within = pickle.dumps([[] for _ in range(999)], protocol=4)  # 1,000 with the outer list
    assert len(safepickle.loads(within, limits)) == 999
    over = pickle.dumps([[] for _ in range(1_000)], protocol=4)
    with pytest.raises(ArtifactRejected, match="more than 1,000 containers"):
        safepickle.loads(over, limits)


def test_the_default_container_budget_fits_the_memory_an_artifact_may_take():
    """Calibrated, not tuned: the containers the budget admits, at the smallest size a
    container has in memory, stay within the expanded bytes one artifact may take."""
    smallest = min(sys.getsizeof([]), sys.getsizeof({}), sys.getsizeof((0,)))
    assert DEFAULT.max_containers * smallest <= DEFAULT_LIMITS.max_expanded_bytes


# --- integer size -----------------------------------------------------------------------------


def _long1(value: int) -> bytes:
    payload = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x80\x04\x8a" + bytes([len(payload)]) + payload + b"."


def test_integers_are_bounded_at_32_bytes_by_default():
    """Real snapshots hold ints below 2**64; 32 bytes is the ceiling, 33 is refused."""
    largest = 2**255 - 1  # 32 bytes, two's complement
    assert safepickle.loads(_long1(largest)) == largest
    with pytest.raises(
        ArtifactRejected, match=r"pickle integer at byte 2 has 257 bits \(limit 256\)"
    ):
        safepickle.loads(_long1(2**256))
    # Inside a list (the scanner's fast path) as well as first (its reference path).
    inside = pickle.dumps([1, 2, 2**256], protocol=4)
    with pytest.raises(ArtifactRejected, match="pickle integer"):
        safepickle.loads(inside)


def test_integers_inside_tuples_are_bounded_too():
    """The token grammar reads a tuple's items with a pattern of their own (a pair or triple
    of scalars, or MARK ... TUPLE): an integer of 33 bytes there leaves the fast path as it
    does anywhere else, and is refused."""
    for value in ([(1, 2**256)], [(1, 2, 2**256)], [(1, 2, 3, 2**256)]):
        data = pickle.dumps(value, protocol=4)
        assert not safepickle._fast_scan(data, DEFAULT, Deadline(60)), value
        assert "pickle integer at byte" in _rejection(data)
    assert safepickle.loads(pickle.dumps([(1, 2**255 - 1)], protocol=4)) == [(1, 2**255 - 1)]


# --- the second layer: find_class and persistent_load ----------------------------------------


class _Touch:
    """Pickles as a call that creates a file: proof of execution if it ever runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_find_class_refuses_every_global_even_when_the_prescan_is_bypassed(tmp_path, monkeypatch):
    """The opcode pre-scan refuses GLOBAL and STACK_GLOBAL first, so this layer is reached
    only if the pre-scan has a hole: make the hole (a no-op pre-scan) and load a pickle
    whose REDUCE would create a file."""
    marker = tmp_path / "executed"
    hostile = pickle.dumps(_Touch(marker), protocol=4)
    assert "not allowed" in _rejection(hostile)  # the pre-scan, normally
    monkeypatch.setattr(safepickle, "prescan", lambda data, limits, deadline: 0)
    reason = _rejection(hostile)
    assert "global pathlib." in reason and "is not allowed" in reason, reason
    assert not marker.exists()
    for reference in (os.system, print, safepickle.loads):
        with pytest.raises(pickle.UnpicklingError, match="is not allowed"):
            safepickle._DataOnlyUnpickler(io.BytesIO(pickle.dumps(reference, protocol=2))).load()


def test_persistent_ids_are_refused_by_the_second_layer():
    data = b"\x80\x02K\x01Q."  # BININT1 1, BINPERSID
    with pytest.raises(pickle.UnpicklingError, match="persistent ids"):
        safepickle._DataOnlyUnpickler(io.BytesIO(data)).load()


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x02])q\x00(NNe.",  # the fuzzer's case: APPENDS onto an empty tuple
        b"\x80\x02X\x01\x00\x00\x00a(Ne.",  # APPENDS onto a string
        b"\x80\x02)(NNu.",  # SETITEMS onto a tuple
    ],
)
def test_appending_onto_a_non_container_is_a_rejection_not_a_crash(data):
    """``test_fast_loads_on_mutated_pickles`` found ``AttributeError`` escaping ``loads``
    (the fast path does not simulate the stack): an upload's analysis died with a
    traceback instead of a reason."""
    assert _rejection(data)


def _rejection(data: bytes) -> str:
    with pytest.raises(ArtifactRejected) as caught:
        safepickle.loads(data)
    return caught.value.reason


def test_a_refused_opcode_is_refused_without_reading_its_argument() -> None:
    # Found by the opcode-soup fuzzer: reading GLOBAL's text argument warned (invalid
    # escape) before the opcode was refused.
    import warnings

    from artifacts import safepickle

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for data in (b"c0\nK\\J\x00I0\n", b"\x80\x04c0\\J\nx\n."):
            with pytest.raises(ArtifactRejected):
                safepickle.loads(data)


# --- the reference scan, opcode by opcode -----------------------------------------------------
#
# The mutation run over this module (.ci/mutation) found the opcode tables and the
# per-opcode checks of the reference scan (``_step``) unkilled: the fast loop in ``prescan``
# and the token grammar take almost every opcode of a real pickle, and the differential
# tests compare against a reference that reads the same tables. A pickle shorter than one
# fast-loop step (9 bytes after PROTO) is scanned by ``_step`` alone, opcode by opcode, and
# a full stack (``max_stack``) hands every later opcode to it too: that is how each test
# below reaches the check it is about.


def _scan(data: bytes, **limits: int) -> int:
    return safepickle.prescan(data, safepickle.PickleLimits(**limits), Deadline(60))


def _scan_refusal(data: bytes, **limits: int) -> str:
    with pytest.raises(ArtifactRejected) as caught:
        _scan(data, **limits)
    return caught.value.reason


# One push of each kind: what each pushes is the value a one-item pickle loads as.
_PUSHES = {
    "NONE": (b"N", None),
    "NEWTRUE": (b"\x88", True),
    "NEWFALSE": (b"\x89", False),
    "BININT": (b"J\xff\xff\xff\xff", -1),
    "BININT1": (b"K\x07", 7),
    "BININT2": (b"M\x00\x01", 256),
    "LONG1": (b"\x8a\x01\xff", -1),
    "LONG4": (b"\x8b\x01\x00\x00\x00\x05", 5),
    "BINFLOAT": (b"G?\xf8\x00\x00\x00\x00\x00\x00", 1.5),
    "SHORT_BINUNICODE": (b"\x8c\x01a", "a"),
    "BINUNICODE": (b"X\x01\x00\x00\x00a", "a"),
    "BINUNICODE8": (b"\x8d\x01\x00\x00\x00\x00\x00\x00\x00a", "a"),
    "SHORT_BINBYTES": (b"C\x01a", b"a"),
    "BINBYTES": (b"B\x01\x00\x00\x00a", b"a"),
    "BINBYTES8": (b"\x8e\x01\x00\x00\x00\x00\x00\x00\x00a", b"a"),
    "EMPTY_LIST": (b"]", []),
    "EMPTY_DICT": (b"}", {}),
    "EMPTY_TUPLE": (b")", ()),
}

# Every other whitelisted opcode, in a pickle that loads as the value given.
_OTHERS = {
    "PROTO": (b"\x80\x02N", None),  # a second PROTO after the first: no effect
    "FRAME": (b"\x95\x01\x00\x00\x00\x00\x00\x00\x00N", None),
    "MEMOIZE": (b"N\x94", None),
    "BINPUT": (b"Nq\x00", None),
    "LONG_BINPUT": (b"Nr\x00\x00\x00\x00", None),
    "MARK": (b"(t", ()),
    "APPEND": (b"]Na", [None]),
    "APPENDS": (b"](NNe", [None, None]),
    "SETITEM": (b"}K\x01Ns", {1: None}),
    "SETITEMS": (b"}(K\x01NK\x02Nu", {1: None, 2: None}),
    "TUPLE": (b"(NNt", (None, None)),
    "TUPLE1": (b"N\x85", (None,)),
    "TUPLE2": (b"NN\x86", (None, None)),
    "TUPLE3": (b"NNN\x87", (None, None, None)),
    "LIST": (b"(Nl", [None]),
    "DICT": (b"(K\x01Nd", {1: None}),
    "BINGET": (b"](N\x94h\x00e", [None, None]),
    "LONG_BINGET": (b"](N\x94j\x00\x00\x00\x00e", [None, None]),
    "STOP": (b"N", None),
}


def test_the_whitelist_is_exactly_the_opcodes_that_load():
    """``ALLOWED_OPCODES`` is the documented whitelist: each opcode in it loads, through the
    reference scan and through ``loads``, and nothing else is in it."""
    samples = {**_PUSHES, **_OTHERS}
    assert set(samples) == safepickle.ALLOWED_OPCODES
    for name, (body, value) in samples.items():
        data = b"\x80\x04" + body + b"."
        ops = {op.name for op, _, _ in pickletools.genops(data)}
        assert name in ops, name
        assert _scan(data) == len(list(pickletools.genops(data))), name
        assert safepickle.loads(data) == value, name


@pytest.mark.parametrize("name", sorted(_PUSHES))
def test_every_push_counts_against_the_stack_limit(name):
    """With the stack full, each push goes to the reference scan, which refuses it by the
    stack limit, not as an unknown opcode; one push within the limit loads."""
    body = _PUSHES[name][0]
    assert _scan(b"\x80\x04" + body + b".", max_stack=1) == 3
    reason = _scan_refusal(b"\x80\x04N" + body + b".", max_stack=1)
    assert reason == "pickle stack exceeds 1 items at byte 3 (nested too deeply?)"
    reason = _scan_refusal(b"\x80\x04N" + body + b".", max_stack=1_000)
    assert reason == f"pickle STOP at byte {3 + len(body)} leaves a malformed stack"


@pytest.mark.parametrize(("container", "tag"), [(b"]", "list"), (b"}", "dict")])
def test_an_empty_list_or_dict_is_one_level_of_nesting(container, tag):
    """A list or dict in a list is two levels deep: refused under ``max_depth=1``, by the
    reference scan (the pickle is too short for the fast loop) and by ``loads``."""
    data = b"\x80\x04]" + container + b"a."
    assert _scan(data, max_depth=2) == 5
    reason = _scan_refusal(data, max_depth=1)
    assert reason == "pickle data nests deeper than 1 levels at byte 4", tag
    assert "nests deeper than 1 levels at byte 4" in _rejection_with(
        data, safepickle.PickleLimits(max_depth=1)
    )


def _rejection_with(data: bytes, limits: safepickle.PickleLimits) -> str:
    with pytest.raises(ArtifactRejected) as caught:
        safepickle.loads(data, limits)
    return caught.value.reason


# One over-long payload of each string/bytes opcode (4 bytes against a limit of 3).
_PAYLOADS = {
    "SHORT_BINUNICODE": b"\x8c\x04abcd",
    "BINUNICODE": b"X\x04\x00\x00\x00abcd",
    "BINUNICODE8": b"\x8d\x04\x00\x00\x00\x00\x00\x00\x00abcd",
    "SHORT_BINBYTES": b"C\x04abcd",
    "BINBYTES": b"B\x04\x00\x00\x00abcd",
    "BINBYTES8": b"\x8e\x04\x00\x00\x00\x00\x00\x00\x00abcd",
}


@pytest.mark.parametrize("name", sorted(_PAYLOADS))
def test_every_string_opcode_is_bounded_by_the_string_limit(name):
    """Each string/bytes opcode, first or after a list (the fast loop's path, which hands
    the over-long one to the reference), is refused by length with the same reason;
    exactly the limit loads."""
    body = _PAYLOADS[name]
    assert safepickle.loads(b"\x80\x04" + body + b".", safepickle.PickleLimits(max_string_bytes=4))
    for prefix in (b"", b"]" * 9):
        data = b"\x80\x04" + prefix + body + b"."
        pos = 2 + len(prefix)
        expected = f"pickle string at byte {pos} is 4 bytes (limit 3)"
        assert _scan_refusal(data, max_string_bytes=3) == expected, (name, prefix)
        if not name.startswith("SHORT_"):
            # The token grammar admits a 1-byte-length string whatever the limit (it is at
            # most 255 bytes): ``loads`` refuses only the longer forms by this limit.
            limits = safepickle.PickleLimits(max_string_bytes=3)
            assert _rejection_with(data, limits) == expected, (name, prefix)


def test_the_default_pickle_limits_are_the_documented_ones():
    """The defaults docs/threat-model.md and the class docstring give, and the string limit
    at its boundary with real bytes: 16 MiB loads, one byte more is refused."""
    assert safepickle.PickleLimits() == safepickle.DEFAULT_PICKLE_LIMITS
    assert (
        DEFAULT.max_depth,
        DEFAULT.max_stack,
        DEFAULT.max_marks,
        DEFAULT.max_string_bytes,
        DEFAULT.max_long_bytes,
        DEFAULT.max_opcodes,
        DEFAULT.max_containers,
    ) == (64, 100_000, 64, 16 * 2**20, 32, 200_000_000, 50_000_000)
    limit = 16 * 2**20
    at = b"\x80\x04B" + limit.to_bytes(4, "little") + bytes(limit) + b"."
    assert len(safepickle.loads(at)) == limit
    over = b"\x80\x04B" + (limit + 1).to_bytes(4, "little") + bytes(limit + 1) + b"."
    with pytest.raises(ArtifactRejected, match="is 16,777,217 bytes \\(limit 16,777,216\\)"):
        safepickle.loads(over)


def test_the_pickle_limits_cannot_be_changed_in_place():
    """Every loader shares ``DEFAULT_PICKLE_LIMITS``: one caller raising a limit on it would
    raise it for every later upload."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT.max_depth = 10**9  # type: ignore[misc]
    assert DEFAULT.max_depth == 64


def test_a_pickle_file_loads_through_the_read_only_map(tmp_path):
    """``load`` reads through ``bounded.mapped``: the scans and the unpickler see the map
    (dropping pages behind them), plain or gzipped, and return exactly what was pickled."""
    value = {"segments": [{"address": 1 << 40, "frames": ["f"] * 3}], "blob": b"\x00" * 5000}
    data = pickle.dumps(value, protocol=4)
    plain = tmp_path / "snapshot.pickle"
    plain.write_bytes(data)
    packed = tmp_path / "snapshot.pickle.gz"
    packed.write_bytes(gzip.compress(data))
    assert safepickle.load(plain) == value
    assert safepickle.load(packed) == value
    with plain.open("rb") as fh:
        assert safepickle.load(fh) == value


def test_the_map_is_read_front_to_back_dropping_pages_behind_it(tmp_path, monkeypatch):
    """A pickle larger than the unpickler's 1 MiB buffer, read in several passes through
    ``_MapReader``, with a page drop every MiB instead of every 64 (the same code path a
    2 GiB snapshot takes): the value comes back intact."""
    monkeypatch.setattr(safepickle, "_DROP_EVERY", 1 << 20)
    value = [bytes([i]) * 100_000 for i in range(40)]  # about 4 MiB, every chunk distinct
    path = tmp_path / "large.pickle"
    path.write_bytes(pickle.dumps(value, protocol=4))
    assert safepickle.load(path) == value


# Each refusal of the reference scan, by its exact reason. The body is scanned twice: as it
# is (short: ``_step`` alone) and with ten harmless pushes after it (the fast loop meets the
# hazard first and must hand it over, unchanged, for the same reason).
_REFUSALS = [
    (b"e", {}, "pickle opcode APPENDS at byte 2 has no MARK"),
    (b"Nt", {}, "pickle opcode TUPLE at byte 3 has no MARK"),
    (b"a", {}, "pickle opcode APPEND at byte 2 pops an empty stack"),
    (b"N(a", {}, "pickle opcode APPEND at byte 4 pops an empty stack"),
    (b"N(\x85", {}, "pickle opcode TUPLE1 at byte 4 pops an empty stack"),
    (b"N(N\x86", {}, "pickle opcode TUPLE2 at byte 5 pops an empty stack"),
    (b"NN(N\x87", {}, "pickle opcode TUPLE3 at byte 6 pops an empty stack"),
    (b"}N(Ns", {}, "pickle opcode SETITEM at byte 6 pops an empty stack"),
    (b"(Na", {}, "pickle opcode APPEND at byte 4 has no container to fill"),
    (b"]((Ne", {}, "pickle opcode APPENDS at byte 6 has no container to fill"),
    (b"}(Nu", {}, "pickle SETITEMS at byte 5 has an odd item count"),
    (b"}N\x85\x85Ns", {}, "pickle dict key at byte 7 nests containers"),
    (b"}(N\x85\x85Nu", {}, "pickle dict key at byte 8 nests containers"),
    (b"(N\x85\x85Nd", {}, "pickle dict key at byte 7 nests containers"),
    (b"(NNN\x85\x85Nd", {}, "pickle dict key at byte 9 nests containers"),  # the second key
    (b"\x94", {}, "pickle opcode MEMOIZE at byte 2 has nothing to store"),
    (b"N(\x94", {}, "pickle opcode MEMOIZE at byte 4 has nothing to store"),
    (b"N(q\x00", {}, "pickle opcode BINPUT at byte 4 has nothing to store"),
    (b"h\x00", {}, "pickle memo index 0 at byte 2 was never stored"),
    (b"N\x94h\x01", {}, "pickle memo index 1 at byte 4 was never stored"),
    (b"N\x94j\x01\x00\x00\x00", {}, "pickle memo index 1 at byte 4 was never stored"),
    (b"Nq\x01", {}, "pickle memo index 1 at byte 3 skips ahead"),
    (b"N\x94r\x02\x00\x00\x00", {}, "pickle memo index 2 at byte 4 skips ahead"),
    (b"N\x94h\x00", {"max_stack": 1}, "pickle stack exceeds 1 items at byte 4"),
    # A BINPUT over a stored slot stores what it now holds: a nested tuple, later a key (a
    # full stack hands the BINPUT to the reference step; the default one to the fast loop).
    (b"}N\x94N\x85\x85q\x00sh\x00Ns", {"max_stack": 3}, "pickle dict key at byte 14 nests"),
    (b"}N\x94N\x85\x85q\x00sh\x00Ns", {}, "pickle dict key at byte 14 nests"),
    (b"((", {"max_marks": 1}, "pickle nests more than 1 MARKs at byte 3"),
    (b"N\x85\x85", {"max_depth": 1}, "pickle data nests deeper than 1 levels at byte 4"),
    (b"(N\x85t", {"max_depth": 1}, "pickle data nests deeper than 1 levels at byte 5"),
    (b"]]a", {"max_depth": 1}, "pickle data nests deeper than 1 levels at byte 4"),
    (b"}(N]u", {"max_depth": 1}, "pickle data nests deeper than 1 levels at byte 6"),
    (b"}N]s", {"max_depth": 1}, "pickle data nests deeper than 1 levels at byte 5"),
    (b"\x8a\x02\x00\x01", {"max_long_bytes": 1}, "pickle integer at byte 2 has 9 bits (limit 8)"),
    (b"\x8b\x02\x00\x00\x00\x00\x01", {"max_long_bytes": 1}, "pickle integer at byte 2 has 9 bits"),
    (b"R", {}, "pickle opcode REDUCE at byte 2 is not allowed (not plain data)"),
]


@pytest.mark.parametrize(("body", "limits", "reason"), _REFUSALS)
def test_each_refusal_of_the_reference_scan_has_its_own_reason(body, limits, reason):
    for data in (b"\x80\x04" + body + b".", b"\x80\x04" + body + b"N" * 10 + b"."):
        assert _scan_refusal(data, **limits).startswith(reason), data


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"N.", "not a pickle of protocol 2-5 (no PROTO opcode at byte 0)"),
        (b"\x80\x01N.", "not a pickle of protocol 2-5 (no PROTO opcode at byte 0)"),
        (b"\x80\x06N.", "not a pickle of protocol 2-5 (no PROTO opcode at byte 0)"),
        (b"\x80\x04NN.", "pickle STOP at byte 4 leaves a malformed stack"),
        (b"\x80\x04.", "pickle STOP at byte 2 leaves a malformed stack"),
        (b"\x80\x04N(.", "pickle STOP at byte 4 leaves a malformed stack"),
        (b"\x80\x04N.N", "1 unexpected bytes after the pickle's STOP opcode"),
        (b"\x80\x04N.NNN", "3 unexpected bytes after the pickle's STOP opcode"),
        (b"\x80\x04N", "truncated or corrupt pickle after byte 2: pickle exhausted before seeing"),
        (b"\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00N.", "pickle frame at byte 2 runs past"),
        (b"\x80", "not a pickle ("),
        (b"\xff", "not a pickle (at position 0, opcode b'\\xff' unknown)"),
    ],
)
def test_the_envelope_of_a_pickle_is_checked_first_and_last(data, reason):
    """PROTO first (2-5), one item left at STOP, nothing after it, frames inside the file."""
    assert _scan_refusal(data).startswith(reason), data


def test_the_protocols_and_frame_lengths_at_their_bounds_are_accepted():
    for protocol in (2, 3, 4, 5):
        assert _scan(bytes([0x80, protocol]) + b"N.") == 3
    # A frame may run exactly to the end of the file (its length counts from its opcode).
    assert _scan(b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00N.") == 4


def test_container_bytes_are_counted_in_a_map_as_in_bytes(tmp_path):
    """The fast path proves nothing when the file holds more EMPTY_LIST/EMPTY_DICT bytes
    than the container budget: counted the same in a map (a file being loaded) as in
    memory, so the C unpickler never builds more containers than the budget first."""
    data = b"\x80\x04]]}}" + b"a" * 3 + b"."
    path = tmp_path / "containers.pickle"
    path.write_bytes(data)
    few, enough = safepickle.PickleLimits(max_containers=3), safepickle.PickleLimits()
    with mapped(path) as view:
        assert safepickle._count(view, b"]") == 2 and safepickle._count(view, b"}") == 2
        assert not safepickle._fast_scan(view, few, Deadline(60))
        assert not safepickle._fast_scan(data, few, Deadline(60))
        # Within the budget the same bytes are proven (and three APPENDs fill them).
        assert safepickle._fast_scan(view, enough, Deadline(60))


class _CountingDeadline(Deadline):
    """A deadline that never expires and counts how often the scan looks at it."""

    def __init__(self) -> None:
        super().__init__(60)
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        super().check()


def test_the_opcode_scan_looks_at_the_clock_once_per_65536_opcodes():
    """The fast loop never crosses a checkpoint: every 65,536th opcode goes to the
    reference step, which checks the deadline and the opcode budget there (and only
    there: the check is not free)."""
    data = b"\x80\x04]" + (b"(" + b"N" * 1_000 + b"e") * 200 + b"."
    deadline = _CountingDeadline()
    count = safepickle.prescan(data, DEFAULT, deadline)
    assert count == 200_403
    assert deadline.checks == count // 65_536 == 3


def test_the_opcode_budget_admits_exactly_its_count():
    data = b"\x80\x04](" + b"N" * 65_531 + b"e."  # 65,536 opcodes
    assert _scan(data, max_opcodes=65_536) == 65_536
    assert _scan_refusal(data, max_opcodes=65_535) == "pickle has more than 65,535 opcodes"


def test_each_limit_of_the_reference_scan_admits_exactly_its_value():
    """The boundary of every per-opcode limit, on pickles short enough that the reference
    step scans each opcode: at the limit is accepted, one over is refused."""
    for name in ("SHORT_BINUNICODE", "BINUNICODE", "SHORT_BINBYTES", "BINBYTES"):
        body = _PUSHES[name][0]  # a one-byte payload
        assert _scan(b"\x80\x04" + body + b".", max_string_bytes=1) == 3, name
        assert "is 1 bytes (limit 0)" in _scan_refusal(
            b"\x80\x04" + body + b".", max_string_bytes=0
        )
    for body in (b"\x8a\x02\xff\x00", b"\x8a\x02\x01\xff", b"\x8b\x02\x00\x00\x00\xff\x00"):
        # 255 and -255: eight bits each, the most one byte of ``max_long_bytes`` admits
        assert _scan(b"\x80\x04" + body + b".", max_long_bytes=1) == 3, body
        assert "has 8 bits (limit 0)" in _scan_refusal(b"\x80\x04" + body + b".", max_long_bytes=0)
    memo_get = b"\x80\x04](N\x94h\x00e."  # three items on the stack at the BINGET
    assert _scan(memo_get, max_stack=3) == 8
    assert _scan_refusal(memo_get, max_stack=2) == "pickle stack exceeds 2 items at byte 6"
    marks = b"\x80\x04((tt."  # two MARKs open at once
    assert _scan(marks, max_marks=2) == 6
    assert _scan_refusal(marks, max_marks=1) == "pickle nests more than 1 MARKs at byte 3"
    nested = b"\x80\x04]]]aa."  # three levels
    assert _scan(nested, max_depth=3) == 7
    assert _scan_refusal(nested, max_depth=2).startswith("pickle data nests deeper than 2")


def test_a_tuple_of_scalars_is_a_valid_key_and_frames_and_protos_pass_the_reference_step():
    """What the reference step must let through: a flat tuple as a dict key (SETITEM,
    SETITEMS, DICT), a frame that ends exactly at the end of the file, a second PROTO.
    A full stack (``max_stack=1`` after one push) hands FRAME and PROTO to the step."""
    assert _scan(b"\x80\x04}N\x85Ns.") == 7
    assert _scan(b"\x80\x04}(N\x85Nu.") == 8
    assert _scan(b"\x80\x04(N\x85Nd.") == 7
    frame = b"\x80\x04N\x95%s."  # the frame at byte 3; 10 bytes from it to the end
    assert _scan(frame % (10).to_bytes(8, "little"), max_stack=1) == 4
    assert (
        _scan_refusal(frame % (11).to_bytes(8, "little"), max_stack=1)
        == "pickle frame at byte 3 runs past the end of the file"
    )
    assert _scan(b"\x80\x04N\x80\x02.", max_stack=1) == 4


@pytest.mark.parametrize(
    ("tail", "what"),
    [
        (b"J\x01\x00", "int4"),  # BININT
        (b"M\x01", "uint2"),  # BININT2
        (b"j\x00\x00", "uint4"),  # LONG_BINGET
        (b"G\x00\x00\x00", "float8"),  # BINFLOAT
        (b"\x95\x01\x00", "uint8"),  # FRAME
        (b"\x8d\x01\x00", "uint8"),  # BINUNICODE8's length
    ],
)
def test_a_fixed_size_argument_cut_short_by_the_end_of_the_file_is_a_truncation(tail, what):
    """The fast loop takes an opcode only when its whole argument is in the file (the last
    nine bytes go to the reference step, which reads them with pickletools' readers): a cut
    argument is named as such, never read past the end (IndexError, struct.error)."""
    data = b"\x80\x04](" + b"N" * 20 + tail
    expected = (
        f"truncated or corrupt pickle after byte 23: not enough data in stream to read {what}"
    )
    assert _scan_refusal(data) == expected


# --- guard-removal mutants (.ci/guard-mutants) --------------------------------------------------
#
# One hand-made mutant per limit and refusal of the loader (.ci/guard_mutants.py); the tests
# below are the ones the first run showed missing. Each feeds the input the guard exists to
# stop through the path where that guard is the only one that stops it.


@pytest.mark.parametrize(
    "data",
    [
        b"K\x02.",  # no PROTO: a BININT1 whose argument looks like a protocol
        b"\x80\x01N.",  # protocol 1
        b"\x80\x04N.N",  # a byte after STOP (the C unpickler stops reading at STOP)
    ],
)
def test_loads_checks_the_envelope_as_the_scan_does(data):
    """The C unpickler loads each of these: the fast path must not prove them, so ``loads``
    refuses them for the reference's reason."""
    assert not safepickle._fast_scan(data, DEFAULT, Deadline(60))
    assert _rejection(data) == _scan_refusal(data)


def test_the_opcode_budget_holds_on_the_fast_path():
    """The token grammar counts no opcodes: it may prove only a file with no more bytes than
    ``max_opcodes`` (each opcode is at least one byte)."""
    data = b"\x80\x04](" + b"N" * 65_531 + b"e."  # 65,536 opcodes, each in the grammar
    assert safepickle._fast_scan(data, DEFAULT, Deadline(60))
    assert len(safepickle.loads(data, safepickle.PickleLimits(max_opcodes=65_536))) == 65_531
    limits = safepickle.PickleLimits(max_opcodes=65_535)
    assert _rejection_with(data, limits) == "pickle has more than 65,535 opcodes"


def test_the_fast_path_checks_the_deadline_every_mib():
    """The grammar runs in C a MiB at a time and looks at the clock between MiBs."""
    data = b"\x80\x04](" + b"N" * (2 * MiB) + b"e."
    deadline = _CountingDeadline()
    assert safepickle._fast_scan(data, DEFAULT, deadline)
    assert deadline.checks == 2  # after the first and the second MiB; the rest ends at STOP
    with pytest.raises(ArtifactRejected, match="time limit"):
        safepickle._fast_scan(data, DEFAULT, _expired())


def test_the_level_walk_checks_the_deadline_at_every_level():
    value = [[[1]], [[2]]]  # three levels of containers
    deadline = _CountingDeadline()
    assert safepickle._fast_structure(value, DEFAULT, deadline) == 5
    assert deadline.checks == 2  # levels two and three
    with pytest.raises(ArtifactRejected, match="time limit"):
        safepickle._fast_structure(value, DEFAULT, _expired())


def test_an_expired_deadline_stops_before_the_unpickler_runs(monkeypatch):
    """The C unpickler cannot be interrupted: an analysis whose time is spent never starts
    it (a small pickle takes the fast path, which looks at the clock only once a MiB)."""
    started: list[bytes] = []

    class _Recording(safepickle._DataOnlyUnpickler):
        def load(self):
            started.append(b"load")
            return super().load()

    monkeypatch.setattr(safepickle, "_DataOnlyUnpickler", _Recording)
    data = pickle.dumps({"a": [1, 2]}, protocol=4)
    assert safepickle.loads(data) == {"a": [1, 2]}
    assert started == [b"load"]
    started.clear()
    with pytest.raises(ArtifactRejected, match="time limit"):
        safepickle.loads(data, deadline=_expired())
    assert started == []


def test_the_deadline_is_checked_again_after_the_unpickler():
    """One look before the C unpickler, one after it, before the result is used or walked."""
    data = pickle.dumps(7, protocol=4)
    for walk in (False, True):
        assert safepickle.loads(data, deadline=ExpiresAfter(2), walk=walk) == 7
        with pytest.raises(ArtifactRejected, match="time limit"):
            safepickle.loads(data, deadline=ExpiresAfter(1), walk=walk)


def test_running_out_of_memory_while_loading_is_a_rejection(monkeypatch):
    """A pickle the pre-scan admits can still need more memory (or C stack) than the worker
    has: the C unpickler raises MemoryError or RecursionError, and the upload is refused
    with a reason instead of failing the analysis with a traceback. (Stubbed: a real
    MemoryError needs a process memory limit.)"""
    data = pickle.dumps([1, 2], protocol=4)
    for error in (MemoryError, RecursionError):

        class _Exhausted(safepickle._DataOnlyUnpickler):
            def load(self, error=error):
                raise error

        monkeypatch.setattr(safepickle, "_DataOnlyUnpickler", _Exhausted)
        assert _rejection(data) == f"pickle too large to load: {error.__name__}"


def _chain(levels: int) -> tuple[list, list]:
    """(outermost, innermost) of ``levels`` lists, each holding the next."""
    top = bottom = []
    for _ in range(levels - 1):
        bottom.append([])
        bottom = bottom[0]
    return top, bottom


def test_a_shared_container_reached_by_a_longer_path_is_too_deep():
    """The reference walk visits a shared container once, by the first path it meets: here a
    short one. The level walk sees every path, so the same 11 levels below the end of a
    61-level chain (73 levels in all) are too deep; the pre-scan cannot see it either (the
    memo hands the shared list over at the depth it had when it was stored)."""
    shared, _ = _chain(11)
    deep, bottom = _chain(61)
    bottom.append(shared)
    value = [shared, deep]
    data = pickle.dumps(value, protocol=4)
    assert safepickle.prescan(data, DEFAULT, Deadline(60))
    assert safepickle._fast_structure(value, DEFAULT, Deadline(60)) == -1
    with pytest.raises(ArtifactRejected, match="nests deeper than 64 levels"):
        safepickle.check_structure(value, DEFAULT, Deadline(60))
    assert _rejection(data) == "pickle data nests deeper than 64 levels"


def test_a_shared_deep_subtree_behind_tuple_keys_is_too_deep():
    """The gap the two walks once left between them: 300 tuple keys put the level walk over
    a budget of 200 before it reaches the deep levels, so the reference walk decides alone,
    and it met the shared 11-level chain first by a short path. Its height (11, not 1)
    joins the path that reaches it again at level 54 or 55: 64 levels load, 65 are refused."""
    limits = safepickle.PickleLimits(max_containers=200)
    for chain, levels in ((52, 64), (53, 65)):
        shared, _ = _chain(11)
        deep, bottom = _chain(chain)
        bottom.append(shared)
        value = [{(i, 0): None for i in range(300)}, shared, deep]
        data = pickle.dumps(value, protocol=4)
        assert safepickle._fast_structure(value, limits, Deadline(60)) is None
        if levels <= 64:
            assert safepickle.loads(data, limits) == value
        else:
            assert _rejection_with(data, limits) == "pickle data nests deeper than 64 levels"


def _unshared_memo_chain(levels: int, keys: int) -> bytes:
    """``[chain, scratch]``: a chain of ``levels`` lists, each filled after it was stored
    (fetched back from the memo, so the pre-scan's stack never sees it deepen), and a
    scratch dict with ``keys`` tuple keys whose key 0 takes each fetched list and lets it
    go, so that in the result every list of the chain is reached by one path only."""
    tuples = b"".join(b"M" + i.to_bytes(2, "little") + b"K\x00\x86N" for i in range(keys))
    parts = [b"\x80\x04]\x94]\x94a}(", tuples, b"u"]  # memo 0: the result; 1: level 0
    for i in range(1, levels):
        parts.append(b"K\x00j" + i.to_bytes(4, "little") + b"]\x94as")
    return b"".join([*parts, b"K\x00Nsa."])


def test_an_unshared_deep_chain_behind_tuple_keys_is_too_deep():
    """The reference walk alone refuses a chain as it descends: the tuple keys put the level
    walk over its budget, the memo hides the depth from the pre-scan, and nothing is shared,
    so no height is ever reused to catch it (63 lists under the result load, 64 do not)."""
    limits = safepickle.PickleLimits(max_containers=200)
    for levels, verdict in ((63, None), (64, "pickle data nests deeper than 64 levels")):
        data = _unshared_memo_chain(levels, keys=300)
        value = pickle.loads(data)  # noqa: S301 - our own bytes, to show what the walks see
        assert safepickle._fast_structure(value, limits, Deadline(60)) is None
        assert safepickle.prescan(data, limits, Deadline(60))
        if verdict is None:
            assert safepickle.loads(data, limits) == value
        else:
            assert _rejection_with(data, limits) == verdict


def _memo_chain(levels: int, prefix: bytes = b"") -> bytes:
    """A sink list holding ``prefix``'s item (if any), then ``levels`` lists each appended
    into the one before and into the sink: the pre-scan's stack stays flat (the memo hands
    each list over at the depth it had when stored), the data is ``levels`` deep."""
    parts = [b"\x80\x04]\x94", prefix, b"]\x94a"]  # memo 0: the sink; memo 1: level 0
    for i in range(1, levels):
        parts += [b"j" + i.to_bytes(4, "little"), b"]\x94a", b"a"]
    return b"".join([*parts, b"."])


def test_depth_is_checked_when_the_level_walk_leaves_the_result_to_the_reference():
    """Tuple keys count as containers to the level walk and not to the reference: 300 of
    them put the level walk over a budget of 200 at level three, before it sees how deep
    the 100-level chain goes, and the reference walk (102 containers, within budget) is
    then the only one left to refuse the depth."""
    keys = b"".join(b"M" + i.to_bytes(2, "little") + b"K\x00\x86N" for i in range(300))
    data = _memo_chain(100, prefix=b"}(" + keys + b"ua")
    limits = safepickle.PickleLimits(max_containers=200)
    assert safepickle._fast_scan(data, limits, Deadline(60))
    assert safepickle.prescan(data, limits, Deadline(60))
    value = pickle.loads(data)  # noqa: S301 - our own bytes, to show what the walks see
    assert safepickle._fast_structure(value, limits, Deadline(60)) is None
    assert _rejection_with(data, limits) == "pickle data nests deeper than 64 levels"


def test_loads_and_load_without_a_deadline_run_under_the_default_one(tmp_path, monkeypatch):
    data = pickle.dumps([1], protocol=4)
    path = tmp_path / "small.pickle"
    path.write_bytes(data)
    with pytest.raises(ArtifactRejected, match="time limit of -1 s"):
        safepickle.load(path, Limits(deadline_s=-1.0))
    monkeypatch.setattr(safepickle, "DEFAULT_LIMITS", Limits(deadline_s=-1.0))
    with pytest.raises(ArtifactRejected, match="time limit of -1 s"):
        safepickle.loads(data)


def test_load_hands_its_limits_and_deadline_to_each_pass(tmp_path):
    """``load`` reads the file under the caller's size caps, scans under the caller's pickle
    limits, and both spend from one deadline."""
    nested = tmp_path / "nested.pickle"
    nested.write_bytes(pickle.dumps([[1]], protocol=4))
    assert safepickle.load(nested) == [[1]]
    reason = _load_refusal(nested, pickle_limits=safepickle.PickleLimits(max_depth=1))
    assert reason.startswith("pickle data nests deeper than 1 levels")
    # Reading the file looks at the clock once; the loader's first look is the second.
    assert _load_refusal(nested, deadline=ExpiresAfter(1)) == (
        "analysis exceeded its time limit of 3600 s"
    )
    large = tmp_path / "large.pickle"
    large.write_bytes(pickle.dumps(bytes(2 * MiB), protocol=4))
    assert _load_refusal(large, Limits(max_file_bytes=MiB)) == "file is larger than the 1 MiB limit"
    assert len(safepickle.load(large)) == 2 * MiB


def _load_refusal(source: Path, *args, **kwargs) -> str:
    with pytest.raises(ArtifactRejected) as caught:
        safepickle.load(source, *args, **kwargs)
    return caught.value.reason


@pytest.mark.parametrize(
    "item",
    [
        b"\x8c\xc8" + b"a" * 200,  # SHORT_BINUNICODE
        b"C\xc8" + b"a" * 200,  # SHORT_BINBYTES
        b"\x8a\x20" + b"\x01" * 32,  # LONG1
        b"\x8b\x20\x00\x00\x00" + b"\x01" * 32,  # LONG4
    ],
)
def test_after_a_long_argument_the_fast_loop_never_reads_past_the_end(item):
    """The fast loop sizes a run by nine bytes an opcode; an argument longer than that eats
    the margin, so the run is cut after it. Otherwise a LONG_BINGET cut short by the end of
    the file is read past it (struct.error, not a rejection)."""
    data = b"\x80\x04](" + item + b"j\x00\x00"
    assert _scan_refusal(data) == (
        "truncated or corrupt pickle after byte 4: not enough data in stream to read uint4"
    )


def test_a_negative_long4_length_is_corrupt_wherever_it_is():
    """A LONG4 of length -1 would move the fast loop backwards; both paths call it corrupt."""
    for prefix in (b"", b"](" + b"N" * 10):
        data = b"\x80\x04" + prefix + b"\x8b\xff\xff\xff\xff" + b"\x00" * 10 + b"."
        at = 1 + len(prefix) if prefix else 0  # the opcode before it: the last N, or PROTO
        assert _scan_refusal(data) == (
            f"truncated or corrupt pickle after byte {at}: long4 byte count < 0: -1"
        )


@pytest.mark.parametrize(
    "body",
    [
        b"}K\x01\x85\x85Ns",  # {((1,),): None}: TUPLE1 of a tuple
        b"}(K\x01\x85tNs",  # the same through MARK ... TUPLE
        b"}N\x85\x85\x85Ns",  # three levels
    ],
)
def test_nested_tuple_keys_never_reach_the_unpickler(body):
    """The grammar admits a tuple opcode only right after the scalars it pops, so no key the
    C unpickler hashes nests a tuple (a memo DAG of them hashes in exponential time)."""
    data = b"\x80\x04" + body + b"."
    assert not safepickle._fast_scan(data, DEFAULT, Deadline(60))
    assert "nests containers" in _rejection(data)
