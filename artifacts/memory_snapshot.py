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

import operator
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, compress, count, islice, repeat
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, overload

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


class Block(NamedTuple):
    """One block of a segment. A named tuple, like :class:`TraceEntry`: a snapshot holds
    thousands, and :func:`_segments_fast` builds them all in C (``tuple.__new__``)."""

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


class Segment(NamedTuple):
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


class Trace(Sequence[TraceEntry]):
    """A device's trace held column by column: ``trace[i]`` and iteration give
    :class:`TraceEntry` rows, built on demand. The analysis reads the columns; building
    100,000 row tuples (and the cyclic GC's walks over them) was most of the validation.

    ``extra``: index -> (frames, device_free) of the ``oom`` entries (``addr`` is None
    there, as in :class:`TraceEntry`).
    """

    __slots__ = ("action", "addr", "extra", "size", "stream", "time_us")

    def __init__(
        self,
        action: list[str],
        addr: list[int | None],
        size: list[int],
        stream: list[int],
        time_us: list[int | None],
        extra: dict[int, tuple[tuple[Frame, ...], int]] | None = None,
    ) -> None:
        self.action = action
        self.addr = addr
        self.size = size
        self.stream = stream
        self.time_us = time_us
        self.extra = extra or {}

    @classmethod
    def of(cls, entries: Iterable[TraceEntry]) -> Trace:
        rows = list(entries)
        if not rows:
            return cls([], [], [], [], [])
        columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)]
        extra = {i: (e.frames, e.device_free or 0) for i, e in enumerate(rows) if e.action == "oom"}
        return cls(columns[0], columns[1], columns[2], columns[3], columns[4], extra)

    def __len__(self) -> int:
        return len(self.action)

    def _row(self, i: int) -> TraceEntry:
        frames, free = self.extra.get(i, ((), None))
        return TraceEntry(self.action[i], self.addr[i], self.size[i], self.stream[i],
                          self.time_us[i], frames, free)  # fmt: skip

    @overload
    def __getitem__(self, i: int) -> TraceEntry: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[TraceEntry, ...]: ...

    def __getitem__(self, i: int | slice) -> TraceEntry | tuple[TraceEntry, ...]:
        if isinstance(i, slice):
            return tuple(self)[i]
        n = len(self.action)
        if not -n <= i < n:
            raise IndexError("trace index out of range")
        return self._row(i % n)

    def __iter__(self) -> Iterator[TraceEntry]:
        rows = map(tuple.__new__, repeat(TraceEntry),
                   zip(self.action, self.addr, self.size, self.stream, self.time_us,
                       repeat(()), repeat(None)))  # fmt: skip
        if not self.extra:
            return rows
        return (self._row(i) if i in self.extra else e for i, e in enumerate(rows))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Trace):
            return (self.action, self.addr, self.size, self.stream, self.time_us,
                    self.extra) == (other.action, other.addr, other.size, other.stream,
                                    other.time_us, other.extra)  # fmt: skip
        if isinstance(other, Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Trace({len(self)} entries)"


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
    device_traces: tuple[Trace, ...]
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

    def convert(self, value: list) -> tuple[Frame, ...] | None:
        """A frame list's frames in C when every frame dict was validated before, else
        :meth:`get`'s work for the new ones; None where :meth:`get` would reject. Neither
        the list cache nor the budget is touched (:func:`_segments_fast` commits both)."""
        known = self.frames
        try:
            return tuple(map(known.__getitem__, map(id, value)))
        except KeyError:
            pass
        for f in value:
            if id(f) in known:
                continue
            if type(f) is not dict:
                return None
            name, line, func = f.get("filename"), f.get("line"), f.get("name")
            if type(name) is not str or type(line) is not int or type(func) is not str:
                return None
            known[id(f)] = (name, line, func)
        return tuple(map(known.__getitem__, map(id, value)))


_DICT = {dict}
_LIST = {list}
_STR = {str}
_BOOL = {bool}
_NONE = type(None)
_FRAME_LISTS = {list, _NONE}


def _frame_columns(
    columns: list[list], frames: _Frames, budget: _Budget, reserve: int
) -> list[list[tuple[Frame, ...]]] | None:
    """Every frame list of ``columns`` (lists of ``list | None``) as frame tuples, each
    distinct list validated once, as :meth:`_Frames.get` does it; None where it would
    reject or the budget (less ``reserve``) would run out (nothing is committed then)."""
    lists = frames.lists
    new: dict[int, tuple[Frame, ...]] = {}
    cost = 0
    for column in columns:
        if not set(map(type, column)) <= _FRAME_LISTS:
            return None
        for value in column:
            key = id(value)
            if value is None or key in lists or key in new:
                continue
            converted = frames.convert(value)
            if converted is None:
                return None
            new[key] = converted
            cost += len(value) + 1
    if cost + reserve > budget.left:
        return None
    budget.take(cost)
    lists.update(new)
    get = lists.get
    return [[get(id(v), ()) for v in column] for column in columns]


def _int_columns(rows: list, spec: tuple[tuple[str, int | None], ...]) -> list[list] | None:
    """``row.get(key, default)`` per (key, default), or None unless all are ints >= 0."""
    columns = [list(map(dict.get, rows, repeat(key), repeat(default))) for key, default in spec]
    flat = list(chain.from_iterable(columns))
    if flat and (set(map(type, flat)) != _INT or min(flat) < 0):
        return None
    return columns


_SEGMENT_INTS = (("device", 0), ("address", None), ("total_size", None), ("allocated_size", 0),
                 ("active_size", 0), ("requested_size", 0), ("stream", 0))  # fmt: skip
_BLOCK_INTS = (("size", None), ("requested_size", 0))


def _segments_fast(
    raw: list, top: Any, frames: _Frames, budget: _Budget
) -> tuple[tuple[Segment, ...], bool] | None:
    """:func:`_segment` over every segment, a column at a time across all segments and all
    their blocks.

    Accepts only what :func:`_segment` accepts segment by segment, with the same result
    (and the same budget taken); anything else returns None and the caller walks the
    segments with :func:`_segment`, which names the fault.
    """
    if not raw or set(map(type, raw)) != _DICT:
        return None
    block_lists: list[Any] = list(map(dict.get, raw, repeat("blocks")))
    if set(map(type, block_lists)) != _LIST:
        return None
    counts = list(map(len, block_lists))
    blocks = list(chain.from_iterable(block_lists))
    if blocks and set(map(type, blocks)) != _DICT:
        return None
    # PyTorch builds every segment, block list and block afresh: all distinct, none seen
    # before, none the containers above them (a cycle).
    ids = set(map(id, raw))
    ids.update(map(id, block_lists))
    ids.update(map(id, blocks))
    nodes = len(raw) + len(blocks)
    if (
        len(ids) != nodes + len(raw)
        or not ids.isdisjoint(budget.seen)
        or id(raw) in ids
        or id(top) in ids
        or nodes > budget.left
    ):
        return None
    seg_ints = _int_columns(raw, _SEGMENT_INTS)
    block_ints = _int_columns(blocks, _BLOCK_INTS)
    if seg_ints is None or block_ints is None:
        return None
    types = list(map(dict.get, raw, repeat("segment_type"), repeat("large")))
    expandable = list(map(dict.get, raw, repeat("is_expandable"), repeat(False)))
    states = list(map(dict.get, blocks, repeat("state")))
    if set(map(type, types)) != _STR or set(map(type, expandable)) != _BOOL:
        return None
    if blocks and set(map(type, states)) != _STR:
        return None
    pools = list(map(dict.get, raw, repeat("segment_pool_id")))
    pairs = [p for p in pools if p is not None]
    if pairs and (
        set(map(type, pairs)) != {tuple}
        or set(map(len, pairs)) != {2}
        or set(map(type, chain.from_iterable(pairs))) != _INT
    ):
        return None
    sizes = block_ints[0]
    addresses: list[Any] = list(map(dict.get, blocks, repeat("address")))
    # torch 2.0 blocks: "history" and no "frames"; their address is the running offset
    has_history = map(dict.__contains__, blocks, repeat("history"))
    has_frames = map(dict.__contains__, blocks, repeat("frames"))
    legacy_at = list(compress(count(), map(operator.gt, has_history, has_frames)))
    block_frames = list(map(dict.get, blocks, repeat("frames")))
    real: list[int | None] = [None] * len(blocks)
    if legacy_at or None in addresses:  # a missing address is the running offset too
        offsets: list[int] = []
        for start, n in zip(seg_ints[1], counts, strict=True):
            at = len(offsets)
            offsets += islice(accumulate(islice(sizes, at, at + n), initial=start), n)
        addresses = list(map(dict.get, blocks, repeat("address"), offsets))
        for i in legacy_at:
            history = blocks[i]["history"]
            if type(history) is not list:
                return None
            addresses[i] = offsets[i]
            if history:
                first = history[0]
                if type(first) is not dict:
                    return None
                real[i] = first.get("real_size")
                block_frames[i] = first.get("frames")
                if type(real[i]) is not int or real[i] < 0:  # type: ignore[operator]
                    return None
    if blocks and (set(map(type, addresses)) != _INT or min(addresses) < 0):
        return None
    legacy = bool(legacy_at)
    converted = _frame_columns(
        [block_frames, list(map(dict.get, raw, repeat("frames")))], frames, budget, nodes
    )
    if converted is None:
        return None
    budget.take(nodes)
    budget.seen |= ids
    out = list(
        map(tuple.__new__, repeat(Block),
            zip(addresses, sizes, block_ints[1], states, converted[0], real, strict=True))
    )  # fmt: skip
    it = iter(out)
    per_segment = [tuple(islice(it, n)) for n in counts]
    # an is_expandable column of bools; pool pairs are kept as the (equal) tuples read
    segments = tuple(
        map(tuple.__new__, repeat(Segment),
            zip(*seg_ints, types, pools, expandable, converted[1], per_segment, strict=True))
    )  # fmt: skip
    return segments, legacy


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


def _sole_references(objs: list) -> bool:
    """True when ``objs`` is the only holder of each of its items, each held once: then no
    item is repeated in it or shared with any other container, so the id set that proves it
    the slow way (60 ns an item, and as much again to merge) is not needed. CPython's
    reference counts; anything else (another holder, another Python) answers False, and
    the caller checks ids."""
    getrefcount = getattr(sys, "getrefcount", None)
    if getrefcount is None:  # pragma: no cover - not CPython
        return False
    probe = [object()]
    return set(map(getrefcount, objs)) == set(map(getrefcount, probe))


def _entries_fast(entries: list, path: str, frames: _Frames, budget: _Budget) -> Trace | None:
    """:func:`_entry` over a whole trace, one column at a time in C.

    Accepts only a trace that :func:`_entry` accepts entry by entry, with the same result;
    anything else (a bad field, a repeated entry, an odd ``oom`` entry) returns None, and
    the caller walks the trace with :func:`_entry`, which names the fault.
    """
    if not entries:
        return Trace([], [], [], [], [])
    if set(map(type, entries)) != _DICT:
        return None
    ids = None
    if not _sole_references(entries):
        ids = set(map(id, entries))
        if len(ids) != len(entries) or not ids.isdisjoint(budget.seen):
            return None
    actions: list[Any] = list(map(dict.get, entries, repeat("action")))
    if set(map(type, actions)) != _STR:
        return None
    times = list(map(dict.get, entries, repeat("time_us")))
    if not set(map(type, times)) <= _TIME:
        return None
    columns = _int_columns(entries, (("addr", 0), ("size", None), ("stream", 0)))
    if columns is None:
        return None
    addrs, sizes, streams = columns
    extra: dict[int, tuple[tuple[Frame, ...], int]] = {}
    if "oom" in actions:  # rare: the ordinary-entry columns above must hold for them too
        for i, action in enumerate(actions):
            if action == "oom":
                e = _entry_oom(entries[i], f"{path}[{i}]", frames)
                addrs[i], sizes[i], streams[i] = None, e.size, e.stream
                extra[i] = (e.frames, e.device_free or 0)
    if ids is not None:
        budget.seen |= ids
    return Trace(actions, addrs, sizes, streams, times, extra)


def _entry_oom(e: dict, path: str, frames: _Frames) -> TraceEntry:
    fr = frames.get(e.get("frames"), f"{path}.frames")
    return TraceEntry("oom", None, _int(e, "size", path, 0), _int(e, "stream", path, 0),
                      e.get("time_us"), fr, _int(e, "device_free", path, 0))  # fmt: skip


def _traces(raw: Any, frames: _Frames, budget: _Budget) -> tuple[Trace, ...]:
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
            fast = Trace.of(
                _entry(e, f"{path}[{i}]", frames, budget) for i, e in enumerate(entries)
            )
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


def _segments_slow(
    raw_segments: list, obj: Any, frames: _Frames, budget: _Budget
) -> tuple[tuple[Segment, ...], bool]:
    segments = []
    legacy = False
    for i, raw in enumerate(raw_segments):
        if raw is raw_segments or raw is obj:
            raise ArtifactRejected(f"segments[{i}] refers back to its container (cycle)")
        seg, old = _segment(raw, f"segments[{i}]", frames, budget)
        legacy |= old
        segments.append(seg)
    return tuple(segments), legacy


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
    fast = _segments_fast(raw_segments, obj, frames, budget)
    if fast is not None:
        segments, legacy = fast
    else:
        segments, legacy = _segments_slow(raw_segments, obj, frames, budget)
    traces = _traces(top["device_traces"], frames, budget) if "device_traces" in top else ()
    settings = _settings(top.get("allocator_settings"))
    notes = (
        _annotations(top["external_annotations"], budget) if "external_annotations" in top else ()
    )
    if legacy:
        layout = "legacy"
    return Snapshot(layout, segments, traces, settings, notes)


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
