"""PyTorch CUDA memory snapshots: safe loading and schema validation (Django-free).

A snapshot (``torch.cuda.memory._dump_snapshot``) is the caching allocator's *final*
segment/block state plus a ring buffer of the newest trace events per device. Reserved and
allocated memory over time are therefore rebuilt **backwards** from the final state
(reference §2, as ``MemoryViz.js`` does): the trace usually starts mid-run, so only the
walk back recovers the baseline that was already there.

Three shapes are accepted: the ``_dump_snapshot`` dict (torch 2.1 → 2.14 keys), a bare list
of segments (``torch.cuda.memory_snapshot()``), and the torch-2.0 legacy layout whose blocks
carry ``history`` instead of ``address``/``frames``. Loading goes through
:mod:`artifacts.safepickle`; the schema is validated into small frozen dataclasses with the
path of any bad field in the rejection reason (trace entries: named tuples, built a column at
a time). Unknown keys are ignored (never walked), and so are the stacks of trace entries
other than ``oom`` (the analysis never reads them).

The analysis of a loaded snapshot is :mod:`artifacts.memory_analysis`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from artifacts import safepickle
from artifacts.bounded import Deadline, Limits, mapped
from artifacts.errors import ArtifactRejected

MiB = 1 << 20
GiB = 1 << 30

# A snapshot becomes ~10x its size in Python objects: cap the unpacked pickle at 1 GiB.
DEFAULT_LIMITS = Limits(max_file_bytes=512 * MiB, max_expanded_bytes=1024 * MiB, deadline_s=300.0)
# Segments + blocks + trace entries + distinct frames visited while validating. Shared
# containers are expanded where the schema places them, so this bounds memo-DAG blow-up.
DEFAULT_MAX_NODES = 20_000_000

DEFAULT_POOL = (0, 0)
LIVE_STATES = frozenset({"active_allocated", "active_pending_free", "active_awaiting_free"})

Frame = tuple[str, int, str]  # (filename, line, name)
PoolId = tuple[int, int]


# --------------------------------------------------------------------------- model


@dataclass(frozen=True, slots=True)
class Block:
    address: int
    size: int
    requested_size: int
    state: str
    frames: tuple[Frame, ...]
    real_size: int | None = None  # torch 2.0: history[0].real_size

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def allocated(self) -> int:
        """Bytes segsum/the viewer count for a live block (``_block_extra``)."""
        return self.real_size if self.real_size is not None else self.requested_size


@dataclass(frozen=True, slots=True)
class Segment:
    device: int
    address: int
    total_size: int
    allocated_size: int
    active_size: int
    requested_size: int
    stream: int
    segment_type: str
    pool_id: PoolId | None  # None: torch 2.0 snapshots have no pool ids
    is_expandable: bool
    frames: tuple[Frame, ...]
    blocks: tuple[Block, ...]

    @property
    def in_graph_pool(self) -> bool:
        return self.pool_id is not None and self.pool_id != DEFAULT_POOL


class TraceEntry(NamedTuple):
    """One ring-buffer event. A named tuple, not a dataclass: a trace holds up to 100,000
    per device, and :func:`_entries_fast` builds them all in C (``tuple.__new__``).

    ``frames`` is kept for ``oom`` entries only: the analysis never reads an ordinary
    entry's stack (``_memory_viz.trace`` does not either), and validating them walked every
    frame reference (ftcourse: 984k references to 646 frames, 70 ms), so, like unknown keys,
    they are neither walked nor kept.
    """

    action: str
    addr: int | None
    size: int
    stream: int
    time_us: int | None
    frames: tuple[Frame, ...]
    device_free: int | None = None  # only for action == "oom"


@dataclass(frozen=True, slots=True)
class Annotation:
    device: int
    time_us: int
    stage: str
    name: str


@dataclass(frozen=True)
class Snapshot:
    """A validated snapshot. ``layout``: ``dump``, ``segments-list`` or ``legacy``."""

    layout: str
    segments: tuple[Segment, ...]
    device_traces: tuple[tuple[TraceEntry, ...], ...]
    allocator_settings: tuple[tuple[str, Any], ...] = ()
    annotations: tuple[Annotation, ...] = ()

    @property
    def devices(self) -> tuple[int, ...]:
        seen = {s.device for s in self.segments}
        seen.update(d for d, trace in enumerate(self.device_traces) if trace)
        return tuple(sorted(seen))


# ------------------------------------------------------------------ schema checks


def _tname(value: Any) -> str:
    return type(value).__name__


def _as_dict(value: Any, path: str) -> dict:
    if type(value) is not dict:
        raise ArtifactRejected(f"{path} is not a dict (got {_tname(value)})")
    return value


def _as_list(value: Any, path: str) -> list:
    if type(value) is not list:
        raise ArtifactRejected(f"{path} is not a list (got {_tname(value)})")
    return value


def _int(d: dict, key: str, path: str, default: int | None = None, *, signed: bool = False) -> int:
    value = d.get(key, default)
    if value is None:
        raise ArtifactRejected(f"{path} has no '{key}'")
    if type(value) is not int:
        raise ArtifactRejected(f"{path}.{key} is not an integer (got {_tname(value)})")
    if value < 0 and not signed:
        raise ArtifactRejected(f"{path}.{key} is negative")
    return value


def _str(d: dict, key: str, path: str, default: str | None = None) -> str:
    value = d.get(key, default)
    if type(value) is not str:
        if value is None:
            raise ArtifactRejected(f"{path} has no '{key}'")
        raise ArtifactRejected(f"{path}.{key} is not a string (got {_tname(value)})")
    return value


class _Budget:
    """Counts schema nodes so memo-shared containers cannot multiply the work unboundedly."""

    def __init__(self, max_nodes: int, deadline: Deadline) -> None:
        self.left = max_nodes
        self.max_nodes = max_nodes
        self.deadline = deadline
        self.seen: set[int] = set()

    def take(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise ArtifactRejected(
                f"snapshot expands to more than {self.max_nodes:,} segments, blocks, events "
                "and frames (shared containers repeated?)"
            )
        if not self.left & 0xFFF:
            self.deadline.check()

    def unique(self, obj: Any, path: str) -> None:
        """PyTorch builds every segment, block, block list and trace entry afresh; only
        frame lists are shared. A repeated one is a memo trick to multiply the work."""
        key = id(obj)
        if key in self.seen:
            raise ArtifactRejected(f"{path} repeats an object seen earlier (shared container)")
        self.seen.add(key)


class _Frames:
    """Validates frame lists once per distinct list object (PyTorch shares them)."""

    def __init__(self, budget: _Budget) -> None:
        self.budget = budget
        self.lists: dict[int, tuple[Frame, ...]] = {}
        self.frames: dict[int, Frame] = {}

    def get(self, value: Any, path: str) -> tuple[Frame, ...]:
        if value is None:
            return ()
        cached = self.lists.get(id(value))
        if cached is not None:
            return cached
        frames = _as_list(value, path)
        self.budget.take(len(frames) + 1)
        out = []
        for i, f in enumerate(frames):
            frame = self.frames.get(id(f))
            if frame is None:
                fpath = f"{path}[{i}]"
                d = _as_dict(f, fpath)
                frame = (_str(d, "filename", fpath), _int(d, "line", fpath, signed=True),
                         _str(d, "name", fpath))  # fmt: skip
                self.frames[id(f)] = frame
            out.append(frame)
        result = tuple(out)
        self.lists[id(value)] = result
        return result


def _pool_id(seg: dict, path: str) -> PoolId | None:
    value = seg.get("segment_pool_id")
    if value is None:
        return None
    if (
        type(value) is not tuple
        or len(value) != 2
        or type(value[0]) is not int
        or type(value[1]) is not int
    ):
        raise ArtifactRejected(f"{path}.segment_pool_id is not a pair of integers")
    return (value[0], value[1])


def _block(raw: Any, path: str, base: int, frames: _Frames, budget: _Budget) -> tuple[Block, bool]:
    b = _as_dict(raw, path)
    budget.unique(b, path)
    size = _int(b, "size", path)
    requested = _int(b, "requested_size", path, 0)
    state = _str(b, "state", path)
    if "frames" in b or "history" not in b:
        address = _int(b, "address", path, base)
        return Block(
            address, size, requested, state, frames.get(b.get("frames"), f"{path}.frames")
        ), False
    history = _as_list(b["history"], f"{path}.history")
    if not history:
        return Block(base, size, requested, state, ()), True
    h0 = _as_dict(history[0], f"{path}.history[0]")
    real = _int(h0, "real_size", f"{path}.history[0]")
    fr = frames.get(h0.get("frames"), f"{path}.history[0].frames")
    return Block(base, size, requested, state, fr, real), True


def _segment(raw: Any, path: str, frames: _Frames, budget: _Budget) -> tuple[Segment, bool]:
    s = _as_dict(raw, path)
    budget.unique(s, path)
    budget.take()
    address = _int(s, "address", path)
    blocks_raw = _as_list(s.get("blocks", []), f"{path}.blocks")
    budget.unique(blocks_raw, f"{path}.blocks")
    budget.take(len(blocks_raw))
    blocks = []
    legacy = False
    offset = address
    for i, b in enumerate(blocks_raw):
        if b is s or b is blocks_raw:
            raise ArtifactRejected(f"{path}.blocks[{i}] refers back to its container (cycle)")
        block, old = _block(b, f"{path}.blocks[{i}]", offset, frames, budget)
        legacy |= old
        offset += block.size
        blocks.append(block)
    expandable = s.get("is_expandable", False)
    if type(expandable) is not bool:
        raise ArtifactRejected(f"{path}.is_expandable is not a boolean (got {_tname(expandable)})")
    seg = Segment(
        device=_int(s, "device", path, 0),
        address=address,
        total_size=_int(s, "total_size", path),
        allocated_size=_int(s, "allocated_size", path, 0),
        active_size=_int(s, "active_size", path, 0),
        requested_size=_int(s, "requested_size", path, 0),
        stream=_int(s, "stream", path, 0),
        segment_type=_str(s, "segment_type", path, "large"),
        pool_id=_pool_id(s, path),
        is_expandable=expandable,
        frames=frames.get(s.get("frames"), f"{path}.frames"),
        blocks=tuple(blocks),
    )
    return seg, legacy


def _entry(raw: Any, path: str, frames: _Frames, budget: _Budget) -> TraceEntry:
    e = _as_dict(raw, path)
    budget.unique(e, path)
    action = _str(e, "action", path)
    time_us = e.get("time_us")
    if time_us is not None and type(time_us) is not int:
        raise ArtifactRejected(f"{path}.time_us is not an integer (got {_tname(time_us)})")
    if action == "oom":
        fr = frames.get(e.get("frames"), f"{path}.frames")
        free = _int(e, "device_free", path, 0)
        return TraceEntry(action, None, _int(e, "size", path, 0), _int(e, "stream", path, 0),
                          time_us, fr, free)  # fmt: skip
    return TraceEntry(action, _int(e, "addr", path, 0), _int(e, "size", path),
                      _int(e, "stream", path, 0), time_us, ())  # fmt: skip


_INT = {int}
_TIME = {int, type(None)}


def _int_column(entries: list, key: str, default: int | None) -> list | None:
    """``entry.get(key, default)`` for every entry, or None unless all are ints >= 0."""
    column = list(map(dict.get, entries, repeat(key), repeat(default)))
    if set(map(type, column)) != _INT or min(column) < 0:
        return None
    return column


def _entries_fast(
    entries: list, path: str, frames: _Frames, budget: _Budget
) -> tuple[TraceEntry, ...] | None:
    """:func:`_entry` over a whole trace, one column at a time in C.

    Accepts only a trace that :func:`_entry` accepts entry by entry, with the same result;
    anything else (a bad field, a repeated entry, an odd ``oom`` entry) returns None, and
    the caller walks the trace with :func:`_entry`, which names the fault.
    """
    if not entries:
        return ()
    if set(map(type, entries)) != {dict}:
        return None
    ids = set(map(id, entries))
    if len(ids) != len(entries) or not ids.isdisjoint(budget.seen):
        return None
    actions = list(map(dict.get, entries, repeat("action")))
    if set(map(type, actions)) != {str}:
        return None
    times = list(map(dict.get, entries, repeat("time_us")))
    if not set(map(type, times)) <= _TIME:
        return None
    addrs = _int_column(entries, "addr", 0)
    sizes = _int_column(entries, "size", None)
    streams = _int_column(entries, "stream", 0)
    if addrs is None or sizes is None or streams is None:
        return None
    budget.seen |= ids
    out = list(
        map(tuple.__new__, repeat(TraceEntry),
            zip(actions, addrs, sizes, streams, times, repeat(()), repeat(None)))
    )  # fmt: skip
    if "oom" in actions:  # rare: the ordinary-entry columns above must hold for them too
        for i, action in enumerate(actions):
            if action == "oom":
                out[i] = _entry_oom(entries[i], f"{path}[{i}]", frames)
    return tuple(out)


def _entry_oom(e: dict, path: str, frames: _Frames) -> TraceEntry:
    fr = frames.get(e.get("frames"), f"{path}.frames")
    return TraceEntry("oom", None, _int(e, "size", path, 0), _int(e, "stream", path, 0),
                      e.get("time_us"), fr, _int(e, "device_free", path, 0))  # fmt: skip


def _traces(raw: Any, frames: _Frames, budget: _Budget) -> tuple[tuple[TraceEntry, ...], ...]:
    traces = _as_list(raw, "device_traces")
    out = []
    for d, trace in enumerate(traces):
        path = f"device_traces[{d}]"
        entries = _as_list(trace, path)
        if entries is traces:
            raise ArtifactRejected(f"{path} refers back to device_traces (cycle)")
        budget.take(len(entries) + 1)
        fast = _entries_fast(entries, path, frames, budget)
        if fast is None:
            fast = tuple(_entry(e, f"{path}[{i}]", frames, budget) for i, e in enumerate(entries))
        out.append(fast)
    return tuple(out)


_SCALARS = (str, int, float, bool, type(None))


def _settings(raw: Any) -> tuple[tuple[str, Any], ...]:
    """``allocator_settings`` parsed permissively: scalars, and flat dicts of scalars."""
    if type(raw) is not dict:
        return ()
    out: list[tuple[str, Any]] = []
    for key, value in list(raw.items())[:200]:
        if type(key) is not str:
            continue
        if type(value) in _SCALARS:
            out.append((key, value))
        elif type(value) is dict:
            flat = tuple(
                (k, v) for k, v in list(value.items())[:200]
                if type(k) is str and type(v) in _SCALARS
            )  # fmt: skip
            out.append((key, flat))
    return tuple(out)


def _annotations(raw: Any, budget: _Budget) -> tuple[Annotation, ...]:
    items = _as_list(raw, "external_annotations")
    budget.take(len(items))
    out = []
    for i, a in enumerate(items):
        path = f"external_annotations[{i}]"
        d = _as_dict(a, path)
        out.append(Annotation(_int(d, "device", path, 0), _int(d, "time_us", path, 0),
                              _str(d, "stage", path, ""), _str(d, "name", path, "")))  # fmt: skip
    return tuple(out)


def validate(
    obj: Any, max_nodes: int = DEFAULT_MAX_NODES, deadline: Deadline | None = None
) -> Snapshot:
    """Turn loaded plain data into a :class:`Snapshot`, or reject it naming the bad field."""
    budget = _Budget(max_nodes, deadline or Deadline(DEFAULT_LIMITS.deadline_s))
    frames = _Frames(budget)
    if type(obj) is list:
        layout, raw_segments, top = "segments-list", obj, {}
    elif type(obj) is dict:
        if "segments" not in obj:
            raise ArtifactRejected(
                "not a memory snapshot: the dict has no 'segments' key "
                f"(keys: {', '.join(sorted(str(k) for k in list(obj)[:8]))})"
            )
        layout, raw_segments, top = "dump", obj["segments"], obj
    else:
        raise ArtifactRejected(f"not a memory snapshot: top level is a {_tname(obj)}")
    raw_segments = _as_list(raw_segments, "segments")
    budget.take(len(raw_segments))
    segments = []
    legacy = False
    for i, raw in enumerate(raw_segments):
        if raw is raw_segments or raw is obj:
            raise ArtifactRejected(f"segments[{i}] refers back to its container (cycle)")
        seg, old = _segment(raw, f"segments[{i}]", frames, budget)
        legacy |= old
        segments.append(seg)
    traces = _traces(top["device_traces"], frames, budget) if "device_traces" in top else ()
    settings = _settings(top.get("allocator_settings"))
    notes = (
        _annotations(top["external_annotations"], budget) if "external_annotations" in top else ()
    )
    if legacy:
        layout = "legacy"
    return Snapshot(layout, tuple(segments), traces, settings, notes)


def load_snapshot(
    source: Path | str | BinaryIO | bytes,
    limits: Limits = DEFAULT_LIMITS,
    *,
    pickle_limits: safepickle.PickleLimits = safepickle.DEFAULT_PICKLE_LIMITS,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> Snapshot:
    """Load and validate an untrusted snapshot file (optionally gzipped) or its bytes."""
    deadline = Deadline(limits.deadline_s)
    if isinstance(source, bytes):
        import io

        source = io.BytesIO(source)
    # Mapped, not read into the heap: the expanded bytes were held twice while joined
    # (2 GiB expanded: 4.26 GB RSS), and once more while the objects were built.
    with mapped(source, limits, deadline) as data:
        # No generic structure walk: validate() is the walk, fixed in depth (it reads the
        # schema's places only, ignoring unknown keys), bounded by max_nodes, and it rejects
        # the cycles and shared containers that could reach it.
        obj = safepickle.loads(data, pickle_limits, deadline, walk=False)
    return validate(obj, max_nodes, deadline)
