"""The snapshot loader's fast paths decide exactly as the slow ones.

- ``_entries_fast`` validates a whole device trace column by column; whatever it does not
  accept goes to ``_entry``, entry by entry, which names the fault. Same entries, same
  reasons.
- ``load_snapshot`` loads without safepickle's generic structure walk (``walk=False``):
  ``validate`` is that walk. Cycles and sharing where the schema reads are rejected by it;
  nesting or cycles under keys it never reads are loaded and dropped, harmlessly, while
  ``safepickle.loads`` (default ``walk=True``) still refuses them.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct

import pytest

from artifacts import safepickle
from artifacts.bounded import Deadline
from artifacts.errors import ArtifactRejected
from artifacts.memory_analysis import analyse_snapshot
from artifacts.memory_snapshot import (
    TraceEntry,
    _Budget,
    _entries_fast,
    _entry,
    _Frames,
    load_snapshot,
    validate,
)
from enginesim.artifacts import build_memory_snapshot
from tests.artifacts.test_memory_snapshot import _rank


def _snapshot() -> dict:
    return build_memory_snapshot(_rank(oom=True), max_entries=400)


def _slow(entries: list) -> tuple[TraceEntry, ...] | str:
    budget = _Budget(10**9, Deadline(60))
    frames = _Frames(budget)
    try:
        return tuple(_entry(e, f"t[{i}]", frames, budget) for i, e in enumerate(entries))
    except ArtifactRejected as exc:
        return exc.reason


def _fast(entries: list) -> tuple[TraceEntry, ...] | None:
    budget = _Budget(10**9, Deadline(60))
    return _entries_fast(entries, "t", _Frames(budget), budget)


def test_fast_entries_equal_the_entry_walk() -> None:
    entries = _snapshot()["device_traces"][0]
    assert any(e["action"] == "oom" for e in entries)
    fast = _fast(entries)
    assert fast is not None and fast == _slow(entries)
    assert all(type(e) is TraceEntry for e in fast)
    oom = next(e for e in fast if e.action == "oom")
    assert oom.addr is None and oom.frames and oom.device_free is not None
    assert all(e.frames == () for e in fast if e.action != "oom")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("action", 3),
        ("addr", -1),
        ("addr", 1.5),
        ("addr", True),
        ("size", None),
        ("size", "12"),
        ("stream", -2),
        ("time_us", 1.0),
    ],
)
def test_a_bad_field_leaves_the_decision_to_the_entry_walk(key: str, value: object) -> None:
    entries = [dict(e) for e in _snapshot()["device_traces"][0] if e["action"] != "oom"]
    entries[7][key] = value
    if value is None:
        del entries[7][key]
    assert _fast(entries) is None
    reason = _slow(entries)
    assert isinstance(reason, str) and reason.startswith("t[7]")


def test_repeated_or_non_dict_entries_go_to_the_entry_walk() -> None:
    entries = _snapshot()["device_traces"][0]
    assert _fast([*entries, entries[0]]) is None
    assert "repeats an object" in _slow([*entries, entries[0]])
    assert _fast([*entries, [1]]) is None
    assert _slow([*entries, [1]]) == f"t[{len(entries)}] is not a dict (got list)"


def test_ordinary_entry_frames_are_ignored_oom_frames_validated() -> None:
    snap = _snapshot()
    entries = snap["device_traces"][0]
    plain = next(i for i, e in enumerate(entries) if e["action"] == "alloc")
    oom = next(i for i, e in enumerate(entries) if e["action"] == "oom")
    entries[plain]["frames"] = [[[["not a frame"]]]]
    assert validate(snap).device_traces[0][plain].frames == ()
    entries[oom]["frames"] = [{"filename": "x.py", "line": "1", "name": "f"}]
    with pytest.raises(ArtifactRejected, match=r"device_traces\[0\]\[\d+\]\.frames\[0\]\.line"):
        validate(snap)


def _with_extra_key(snap: dict, value_ops: bytes) -> bytes:
    """``snap`` pickled, then ``snap["junk"] = <the object value_ops builds>``."""
    data = pickle.dumps(snap, protocol=4)
    assert data.endswith(b".")
    return data[:-1] + b"\x8c\x04junk" + value_ops + b"s."


def _memo_size(data: bytes) -> int:
    return sum(op.name == "MEMOIZE" for op, _, _ in pickletools.genops(io.BytesIO(data)))


def test_deep_nesting_under_an_unknown_key_loads_and_is_dropped() -> None:
    snap = _snapshot()
    depth = 20_000
    data = _with_extra_key(snap, b"]" * depth + b"a" * (depth - 1))
    with pytest.raises(ArtifactRejected, match="nests deeper than 64"):
        safepickle.loads(data)
    loaded = load_snapshot(data)
    assert analyse_snapshot(loaded).as_dict() == analyse_snapshot(validate(snap)).as_dict()


def test_a_cycle_under_an_unknown_key_loads_and_is_dropped() -> None:
    snap = _snapshot()
    base = pickle.dumps(snap, protocol=4)
    index = _memo_size(base)
    data = _with_extra_key(snap, b"]\x94j" + struct.pack("<I", index) + b"a")
    with pytest.raises(ArtifactRejected, match="self-referential"):
        safepickle.loads(data)
    assert load_snapshot(data).segments == validate(snap).segments


def test_cycles_where_the_schema_reads_are_rejected() -> None:
    snap = _snapshot()
    frames: list = []
    frames.append(frames)
    snap["segments"][0]["frames"] = frames
    with pytest.raises(ArtifactRejected, match=r"segments\[0\]\.frames\[0\] is not a dict"):
        load_snapshot(pickle.dumps(snap, protocol=4))
    snap = _snapshot()
    snap["segments"][0]["blocks"].append(snap["segments"][0])
    with pytest.raises(ArtifactRejected, match="refers back to its container"):
        load_snapshot(pickle.dumps(snap, protocol=4))
    snap = _snapshot()
    snap["device_traces"].append(snap["device_traces"])
    with pytest.raises(ArtifactRejected, match="refers back to device_traces"):
        load_snapshot(pickle.dumps(snap, protocol=4))
