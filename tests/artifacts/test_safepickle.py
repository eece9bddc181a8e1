"""Hostile pickles end as ArtifactRejected with a precise reason, fast, executing nothing."""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from artifacts import safepickle
from artifacts.bounded import Limits
from artifacts.errors import ArtifactRejected
from artifacts.memory_snapshot import load_snapshot

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def rejected(data: bytes | io.BytesIO, **kw) -> str:
    start = time.perf_counter()
    with pytest.raises(ArtifactRejected) as info:
        if isinstance(data, bytes):
            safepickle.loads(data, **kw)
        else:
            safepickle.load(data, **kw)
    assert time.perf_counter() - start < 5.0
    return info.value.reason


class _Marker:
    """Pickles as a call that would create a file: proof of execution if it ever runs."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_reduce_of_a_callable_is_refused_and_never_runs(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "executed"
    data = pickle.dumps({"segments": [_Marker(str(marker))]}, protocol=protocol)
    reason = rejected(data)
    assert "is not allowed" in reason and "byte" in reason
    assert ("GLOBAL" in reason) or ("STACK_GLOBAL" in reason)
    assert not marker.exists()
    with pytest.raises(ArtifactRejected):
        load_snapshot(io.BytesIO(data))
    assert not marker.exists()


def test_os_system_reference_is_refused() -> None:
    reason = rejected(pickle.dumps(os.system, protocol=4))
    assert re.fullmatch(
        r"pickle opcode STACK_GLOBAL at byte \d+ is not allowed \(not plain data\)", reason
    )
    assert "GLOBAL at byte 2" in rejected(b"\x80\x02cos\nsystem\nq\x00.")


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("REDUCE", b"]\x94)R"),  # [] () REDUCE: calling a list, were it allowed
        ("BUILD", b"}\x94}b"),
        ("INST", b"(ios\nsystem\n"),
        ("OBJ", b"(]o"),
        ("NEWOBJ", b"])\x81"),
        ("NEWOBJ_EX", b"])}\x92"),
        ("BINPERSID", b"NQ"),
        ("PERSID", b"P1\n"),
        ("EXT1", b"\x82\x01"),
        ("POP", b"N0"),
        ("BYTEARRAY8", b"\x96" + (1).to_bytes(8, "little") + b"x"),
        ("NEXT_BUFFER", b"\x97"),
    ],
)
def test_every_non_data_opcode_is_refused_by_name(name: str, body: bytes) -> None:
    data = b"\x80\x05" + body + b"."
    assert re.match(rf"pickle opcode {name} at byte \d+ is not allowed", rejected(data))


def test_deep_list_nesting_is_refused_in_the_prescan() -> None:
    n = 1_000_000
    data = b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b"."
    reason = rejected(data)
    assert "stack exceeds" in reason


def test_deep_nesting_through_the_memo_with_a_flat_stack_is_refused() -> None:
    # Each level: get the previous list, push a new one, memoize it, append it. The stack
    # stays small; the post-load walk (explicit stack) catches the depth.
    parts = [b"\x80\x04]\x94", b"]\x94a"]  # memo 0: a sink list; memo 1: level 0, in the sink
    for i in range(1, 5000):
        parts.append(b"j" + i.to_bytes(4, "little"))  # LONG_BINGET level i-1 (memo i)
        parts.append(b"]\x94a")  # level i (memo i+1) appended into level i-1
        parts.append(b"a")  # level i-1 appended into the sink: the stack is back to [sink]
    parts.append(b".")
    data = b"".join(parts)
    reason = rejected(data)
    assert "nests deeper than 64" in reason


def test_deep_tuple_dict_key_is_refused_before_the_unpickler_hashes_it() -> None:
    # Stock pickle.loads segfaults on this (C recursion in tuple hashing): run it through our
    # loader in a subprocess so a regression cannot take the test runner down with it.
    code = (
        "from artifacts import safepickle\n"
        "from artifacts.errors import ArtifactRejected\n"
        "data = b'\\x80\\x04}N' + b'\\x85' * 1_000_000 + b'Ns.'\n"
        "try:\n    safepickle.loads(data)\nexcept ArtifactRejected as e:\n    print(e.reason)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "nests deeper than 64 levels at byte" in out.stdout


def test_huge_long4_is_refused() -> None:
    n = 50 * MiB
    data = b"\x80\x04\x8b" + n.to_bytes(4, "little") + b"\x01" * n + b"."
    assert "pickle integer at byte 2 has" in rejected(data)
    # A LONG4 that claims more bytes than the file holds is a truncation.
    assert "truncated or corrupt" in rejected(b"\x80\x04\x8b\xff\xff\xff\x7f\x01.")


def test_huge_string_and_memo_index_are_refused() -> None:
    s = b"x" * (2 * MiB)
    data = b"\x80\x04X" + len(s).to_bytes(4, "little") + s + b"."
    limits = safepickle.PickleLimits(max_string_bytes=MiB)
    assert "pickle string at byte 2 is 2,097,152 bytes" in rejected(data, limits=limits)
    # LONG_BINPUT 0x7fffffff would make the C unpickler allocate a 16 GiB memo.
    assert "skips ahead" in rejected(b"\x80\x04]r\xff\xff\xff\x7f.")
    assert "never stored" in rejected(b"\x80\x04]h\x05.")


def test_gzip_bomb_stops_at_the_expansion_cap() -> None:
    # 10 GB of zeros would compress to ~10 MB; stream a few hundred MB worth and let the cap
    # trip at 16 MiB without ever holding the expanded data.
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(MiB)
    parts = [comp.compress(chunk) for _ in range(256)]
    parts.append(comp.flush())
    source = io.BytesIO(b"".join(parts))
    reason = rejected(source, limits=Limits(max_expanded_bytes=16 * MiB))
    assert "expands past the 16 MiB limit" in reason


def test_truncated_not_a_pickle_json_and_trailing_garbage() -> None:
    good = pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=4)
    assert "truncated or corrupt pickle" in rejected(good[:-5]) or "frame" in rejected(good[:-5])
    assert rejected(good[:-1]) == "truncated pickle: no STOP opcode" or "truncated" in rejected(
        good[:-1]
    )
    assert rejected(b"PK\x03\x04 zip").startswith("not a pickle")
    assert rejected(b'{"segments": []}').startswith("not a pickle")
    assert rejected(pickle.dumps([1, 2], protocol=1)).startswith("not a pickle of protocol 2-5")
    assert "unexpected bytes after" in rejected(good + b"junk")
    with pytest.raises(ArtifactRejected, match="file is empty"):
        safepickle.load(io.BytesIO(b""))


def test_self_reference_and_shared_dag() -> None:
    selfref: list = []
    selfref.append(selfref)
    assert "self-referential" in rejected(pickle.dumps(selfref, protocol=4))
    d: dict = {}
    d["x"] = [d]
    assert "self-referential" in rejected(pickle.dumps(d, protocol=4))
    # A DAG that doubles at each of 60 levels (2**60 paths) is checked in linear time.
    node: list = []
    for _ in range(60):
        node = [node, node]
    assert safepickle.loads(pickle.dumps(node, protocol=4)) is not None


def test_plain_data_round_trips_across_protocols() -> None:
    for protocol in (2, 3, 4, 5):
        # protocol 2 pickles bytes as a codecs.encode call: plain data only from 3 on
        raw = [b"raw"] if protocol >= 3 else []
        value = {"a": [1, 2.5, None, True, False, "é", (0, 1), (), 2**64 + 1, *raw], "b": {}}
        data = pickle.dumps(value, protocol=protocol)
        ops = {op.name for op, _, _ in pickletools.genops(data)}
        assert ops <= safepickle.ALLOWED_OPCODES, ops - safepickle.ALLOWED_OPCODES
        assert safepickle.loads(data) == value


def test_opcode_budget_and_deadline() -> None:
    data = pickle.dumps(list(range(200_000)), protocol=4)
    assert "more than 65,536 opcodes" in rejected(
        data, limits=safepickle.PickleLimits(max_opcodes=65_536)
    )
    deadline = safepickle.Deadline(0.0)
    time.sleep(0.01)
    with pytest.raises(ArtifactRejected, match="time limit"):
        safepickle.loads(data, deadline=deadline)
