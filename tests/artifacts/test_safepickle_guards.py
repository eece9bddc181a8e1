"""Each limit and refusal of the pickle loader, tested on its own (issue 19.14).

A hand-made mutation run found guards whose removal no test noticed: the container budget
raised 1,000x, the deadline check inside the scans dropped (``loads`` checks the deadline
again after each pass, which hid it), ``max_long_bytes`` raised from 32 to 4,096, and
``find_class`` resolving globals (the opcode pre-scan refuses them first, so the second
layer was never exercised). Each test below fails with its mutant; the mutants are listed
in docs/threat-model.md.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import time
from pathlib import Path

import pytest

from artifacts import safepickle
from artifacts.bounded import DEFAULT_LIMITS, Deadline
from artifacts.errors import ArtifactRejected

DEFAULT = safepickle.DEFAULT_PICKLE_LIMITS


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
