"""PyTorch CUDA memory snapshots: the analysis of a loaded :class:`Snapshot` (Django-free).

Loading and validation are :mod:`artifacts.memory_snapshot`; this rebuilds memory over
time and finds steps, leaks and graph-pool growth.

Definitions used by :func:`analyse_snapshot` (all bytes, per device and summed):

- ``reserved_bytes``: Σ segment ``total_size``.
- ``allocated_bytes``: Σ block ``requested_size`` of ``active_allocated`` and
  ``active_pending_free`` blocks (the viewer's figure; legacy blocks: ``history[0].real_size``).
  ``allocated_rounded_bytes`` is Σ segment ``allocated_size`` (what
  ``torch.cuda.memory_allocated()`` reports). ``segsum_allocated_bytes``,
  ``free_internal_bytes`` and ``free_external_bytes`` are exactly ``_memory_viz.segsum``'s
  (only ``active_allocated`` counts as allocated there).
- ``graph_pool_bytes``: reserved bytes in segments whose ``segment_pool_id`` is not (0, 0)
  (CUDA-graph private pools / MemPools).
- A reserved **step** is a burst of segment events (gaps ≤ 0.5 s, or ≤ 16 events without
  ``time_us``; a burst is at most 10 s / 1,000 events long) that raises reserved by
  ≥ ``STEP_MIN_BYTES`` (256 MiB).
- The allocated **floor** at time t is min(allocated(s) for s ≥ t): bytes held from t to the
  end of the trace, i.e. never returned. Leak metrics come from it.

Signals (``as_dict()["signals"]``, evidence for playbooks):

- ``artifact_reserved_bytes``, ``artifact_allocated_bytes`` (B): final state, all devices.
- ``artifact_graph_pool_bytes`` (B): final reserved bytes in private (graph) pools.
- ``artifact_graph_pool_growth_bytes`` (B): private-pool reserved at the end minus at the
  start of the trace, summed over devices.
- ``artifact_reserved_step_count`` (count), ``artifact_reserved_step_max_bytes`` (B).
- ``artifact_allocated_growth_bytes`` (B): allocated at the end minus the lowest allocated
  in the trace (the floor's rise), max over devices.
- ``artifact_leak_fraction`` (0-1): share of the trace's 10 equal slices (time, or event
  index without ``time_us``) in which the floor rose by ≥ 16 MiB, for the
  device with the largest growth. A leak keeps raising the floor in every slice; start-up
  allocations raise it in one or two.
- ``artifact_allocated_slope_bytes_per_s`` (B/s): the *median* slice's floor rise / slice
  duration (0 without ``time_us``): a leak's rate, while one-off start-up growth gives 0.
- ``artifact_oom_count`` (count): ``oom`` trace entries.
- ``artifact_reserved_gap_bytes`` (B): reserved - allocated at the final state.
- ``artifact_trace_entries`` (count), ``artifact_trace_span_s`` (s, 0 without ``time_us``).
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, compress, count, filterfalse, islice, repeat
from typing import Any, NamedTuple

from artifacts.memory_snapshot import (
    LIVE_STATES,
    Frame,
    GiB,
    MiB,
    PoolId,
    Segment,
    Snapshot,
    Trace,
    TraceEntry,
)

_ALLOCATED_SIGN = {"alloc": -1, "free_completed": 1}
SEGMENT_GROW = frozenset({"segment_alloc", "segment_map"})
SEGMENT_SHRINK = frozenset({"segment_free", "segment_unmap"})
_SEGMENT_EVENTS = SEGMENT_GROW | SEGMENT_SHRINK

STEP_MIN_BYTES = 256 * MiB
STEP_GAP_US = 500_000
STEP_MAX_SPAN_US = 10_000_000
STEP_GAP_EVENTS = 16
STEP_MAX_SPAN_EVENTS = 1_000
TIMELINE_MAX_POINTS = 2_000
TIMELINE_MAX_POOLS = 8
LEAK_SLICES = 10
LEAK_SLICE_MIN_BYTES = 16 * MiB
TOP_SITES = 10

# Finding thresholds, chosen against enginesim's scenarios and the real samples (tests).
GRAPH_POOL_FINDING_BYTES = 1 * GiB  # private pools hold this much at the end ...
GRAPH_POOL_GROWTH_FINDING_BYTES = 1 * GiB  # ... and grew this much during the trace
LEAK_FINDING_SLOPE_BYTES_PER_S = 1 * MiB  # steady growth of >= 3.5 GiB/hour ...
LEAK_FINDING_FRACTION = 0.7  # ... in >= 7 of 10 slices of a trace ...
LEAK_FINDING_MIN_SPAN_S = 60.0  # ... spanning at least a minute (not one training step)


@dataclass(frozen=True)
class Step:
    """A burst of segment events that raised reserved memory by ``bytes``."""

    device: int
    x_start: int
    x_end: int
    bytes: int
    pool: str  # dominant pool of the rise, "0,0" = default pool, "unknown" = freed since
    graph_pool: bool
    segments: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "x_start": self.x_start, "x_end": self.x_end,
            "bytes": self.bytes, "pool": self.pool, "graph_pool": self.graph_pool,
            "segments": self.segments,
        }  # fmt: skip


@dataclass(frozen=True)
class Oom:
    device: int
    x: int
    time_us: int | None
    requested_bytes: int
    device_free_bytes: int
    reserved_bytes: int
    allocated_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Site:
    site: str
    bytes: int
    blocks: int
    devices: tuple[int, ...]
    stack: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "bytes": self.bytes, "blocks": self.blocks,
                "devices": list(self.devices), "stack": list(self.stack)}  # fmt: skip


@dataclass(frozen=True)
class DeviceAnalysis:
    device: int
    segments: int
    reserved_bytes: int
    allocated_bytes: int
    allocated_rounded_bytes: int
    segsum_allocated_bytes: int
    free_internal_bytes: int
    free_external_bytes: int
    graph_pool_bytes: int
    pools: dict[str, int]
    trace_entries: int
    x_unit: str
    span_s: float
    start_reserved_bytes: int
    start_allocated_bytes: int
    graph_pool_start_bytes: int
    allocated_growth_bytes: int
    leak_fraction: float
    allocated_slope_bytes_per_s: float
    steps: tuple[Step, ...]
    ooms: tuple[Oom, ...]
    timeline: dict[str, Any]
    pools_unknown_events: int = 0

    @property
    def graph_pool_growth_bytes(self) -> int:
        return self.graph_pool_bytes - self.graph_pool_start_bytes

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("steps", "ooms", "timeline")}
        out["graph_pool_growth_bytes"] = self.graph_pool_growth_bytes
        out["steps"] = [s.as_dict() for s in self.steps]
        out["ooms"] = [o.as_dict() for o in self.ooms]
        return out


@dataclass(frozen=True)
class MemoryAnalysis:
    layout: str
    devices: tuple[DeviceAnalysis, ...]
    top_sites: tuple[Site, ...]
    findings: tuple[dict[str, Any], ...]
    signals: dict[str, float] = field(default_factory=dict)

    @property
    def reserved_bytes(self) -> int:
        return sum(d.reserved_bytes for d in self.devices)

    @property
    def allocated_bytes(self) -> int:
        return sum(d.allocated_bytes for d in self.devices)

    @property
    def graph_pool_bytes(self) -> int:
        return sum(d.graph_pool_bytes for d in self.devices)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able summary; ``timeline`` holds each device's downsampled curves."""

        def total(name: str) -> int:
            return sum(getattr(d, name) for d in self.devices)

        return {
            "kind": "memory-snapshot",
            "layout": self.layout,
            "reserved_bytes": self.reserved_bytes,
            "allocated_bytes": self.allocated_bytes,
            "allocated_rounded_bytes": total("allocated_rounded_bytes"),
            "segsum_allocated_bytes": total("segsum_allocated_bytes"),
            "free_internal_bytes": total("free_internal_bytes"),
            "free_external_bytes": total("free_external_bytes"),
            "graph_pool_bytes": self.graph_pool_bytes,
            "reserved_gap_bytes": self.reserved_bytes - self.allocated_bytes,
            "devices": [d.as_dict() for d in self.devices],
            "steps": [s.as_dict() for d in self.devices for s in d.steps],
            "timeline": {str(d.device): d.timeline for d in self.devices},
            "top_sites": [s.as_dict() for s in self.top_sites],
            "ooms": [o.as_dict() for d in self.devices for o in d.ooms],
            "findings": [dict(f) for f in self.findings],
            "signals": dict(self.signals),
        }


_NOT_GRAPH = ("0,0", "none", "unknown")


def pool_key(pool: PoolId | None) -> str:
    return "none" if pool is None else f"{pool[0]},{pool[1]}"


class _PoolIndex:
    """Resolve a trace address to the pool of the final segment containing it (bisect)."""

    def __init__(self, segments: Sequence[Segment]) -> None:
        ordered = sorted(segments, key=lambda s: s.address)
        self.starts = [s.address for s in ordered]
        self.ends = [s.address + s.total_size for s in ordered]
        self.pools = [pool_key(s.pool_id) for s in ordered]
        self.has_graph_pools = any(p not in _NOT_GRAPH for p in self.pools)

    def find(self, addr: int) -> str:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ends[i]:
            return self.pools[i]
        return "unknown"


class _Blocks(NamedTuple):
    """Every block of some segments, a column per field (in segment order)."""

    states: Sequence[str]
    sizes: Sequence[int]
    allocated: Sequence[int]  # Block.allocated
    frames: Sequence[tuple[Frame, ...]]
    devices: list[int]
    graph: list[bool]  # in a graph pool


_BLOCKS = operator.attrgetter("blocks")


def _block_columns(segs: Sequence[Segment]) -> _Blocks:
    """The blocks' columns: the final-state sums and the sites are C-level passes over them."""
    blocks = list(chain.from_iterable(map(_BLOCKS, segs)))
    if not blocks:
        return _Blocks((), (), (), (), [], [])
    _address, sizes, requested, states, frames, real = zip(*blocks, strict=True)
    if real.count(None) == len(real):
        allocated: Sequence[int] = requested
    else:
        allocated = [q if r is None else r for q, r in zip(requested, real, strict=True)]
    counts = list(map(len, map(_BLOCKS, segs)))
    devices = list(chain.from_iterable(map(repeat, (s.device for s in segs), counts)))
    graph = list(chain.from_iterable(map(repeat, (s.in_graph_pool for s in segs), counts)))
    return _Blocks(states, sizes, allocated, frames, devices, graph)


def _final_state(segs: Sequence[Segment], blocks: _Blocks | None = None) -> dict[str, Any]:
    """Final totals; free_internal/free_external exactly as ``_memory_viz.segsum``."""
    pools: dict[str, int] = {}
    for s in segs:
        key = pool_key(s.pool_id)
        pools[key] = pools.get(key, 0) + s.total_size
    cols = _block_columns(segs) if blocks is None else blocks
    live = list(map(LIVE_STATES.__contains__, cols.states))
    active = list(map(operator.eq, cols.states, repeat("active_allocated")))
    segsum_alloc = sum(compress(cols.allocated, active))
    active_sizes = sum(compress(cols.sizes, active))
    return {
        "reserved": sum(s.total_size for s in segs),
        "allocated": sum(compress(cols.allocated, live)),
        "rounded": sum(s.allocated_size for s in segs),
        "segsum_allocated": segsum_alloc,
        "free_internal": active_sizes - segsum_alloc,
        "free_external": sum(cols.sizes) - active_sizes,
        "pools": pools,
        "graph": sum(s.total_size for s in segs if s.in_graph_pool),
        "graph_allocated": sum(compress(cols.allocated, map(operator.and_, live, cols.graph))),
    }


@dataclass
class Curve:
    """State after each event, rebuilt backwards. Index -1 is the state before the trace."""

    x: list[int]
    reserved: list[int]
    allocated: list[int]
    start_reserved: int
    start_allocated: int
    # pool -> (start value, [(event index, value after event)]) for segment events
    pools: dict[str, tuple[int, list[tuple[int, int]]]]
    seg_events: list[tuple[int, int, str]]  # (event index, delta, pool)
    timed: bool  # x is time_us (every entry has it), else the event index
    # Allocated bytes inside CUDA-graph private pools after each event: a captured graph's
    # memory is held for the life of the process by design, so it is pool growth, not a leak.
    graph_allocated: list[int] = field(default_factory=list)
    start_graph_allocated: int = 0


def _suffix_sums(deltas: list[int], end: int) -> tuple[list[int], int]:
    """``state[i] = end + sum(deltas[i + 1:])`` for every i, and ``end + sum(deltas)``: the
    state after each event and before the first, walking back from ``end`` (in C)."""
    acc = list(accumulate(reversed(deltas), initial=end))
    start = acc.pop()
    acc.reverse()
    return acc, start


def reconstruct(
    entries: Sequence[TraceEntry],
    reserved_end: int,
    allocated_end: int,
    pools_end: dict[str, int],
    index: _PoolIndex,
    graph_allocated_end: int = 0,
) -> Curve:
    """Walk the trace backwards from the final state (reference §2).

    Column by column: each curve is a suffix sum of per-event deltas (``_suffix_sums``), so
    the per-event work is one comprehension; only segment events are walked one by one.
    """
    n = len(entries)
    if not n:
        return Curve([], [], [], reserved_end, allocated_end,
                     {p: (v, []) for p, v in pools_end.items()}, [], False, [],
                     graph_allocated_end)  # fmt: skip
    trace = entries if isinstance(entries, Trace) else Trace.of(entries)
    actions, addrs, sizes, times = trace.action, trace.addr, trace.size, trace.time_us
    timed = None not in times
    x = list(times) if timed else list(range(n))
    # -size for alloc, +size for free_completed, 0 otherwise
    deltas = list(map(operator.mul, map(_ALLOCATED_SIGN.get, actions, repeat(0)), sizes))
    allocated, a = _suffix_sums(deltas, allocated_end)
    if index.has_graph_pools:
        find = functools.lru_cache(maxsize=None)(index.find)
        graph_deltas = [
            d if d and find(addr or 0) not in _NOT_GRAPH else 0
            for d, addr in zip(deltas, addrs, strict=True)
        ]
        graph_allocated, g = _suffix_sums(graph_deltas, graph_allocated_end)
    else:  # no event can land in a graph pool: the curve is flat
        graph_allocated, g = [graph_allocated_end] * n, graph_allocated_end
    reserved_deltas = [0] * n
    pool_now = dict(pools_end)
    pool_points: dict[str, list[tuple[int, int]]] = {}
    seg_events: list[tuple[int, int, str]] = []
    segment_indexes = list(compress(count(), map(_SEGMENT_EVENTS.__contains__, actions)))
    for i in reversed(segment_indexes):
        action = actions[i]
        delta = sizes[i] if action in SEGMENT_GROW else -sizes[i]
        pool = index.find(addrs[i] or 0)
        value = pool_now.get(pool, 0)
        pool_points.setdefault(pool, []).append((i, value))
        pool_now[pool] = value - delta
        seg_events.append((i, delta, pool))
        reserved_deltas[i] = -delta
    reserved, r = _suffix_sums(reserved_deltas, reserved_end)
    for points in pool_points.values():
        points.reverse()
    seg_events.reverse()
    pools = {
        p: (pool_now.get(p, 0), pool_points.get(p, [])) for p in set(pool_now) | set(pool_points)
    }
    return Curve(x, reserved, allocated, r, a, pools, seg_events, timed, graph_allocated, g)


def find_steps(device: int, curve: Curve, timed: bool) -> list[Step]:
    """Bursts of segment events whose net rise is at least ``STEP_MIN_BYTES``."""
    gap, span = (
        (STEP_GAP_US, STEP_MAX_SPAN_US) if timed else (STEP_GAP_EVENTS, STEP_MAX_SPAN_EVENTS)
    )
    x = curve.x
    bursts: list[list[tuple[int, int, str]]] = []
    for ev in curve.seg_events:
        if bursts:
            last = bursts[-1]
            xi = x[ev[0]]
            if xi - x[last[-1][0]] <= gap and xi - x[last[0][0]] <= span:
                last.append(ev)
                continue
        bursts.append([ev])
    steps = []
    for burst in bursts:
        net = sum(d for _, d, _ in burst)
        if net < STEP_MIN_BYTES:
            continue
        by_pool: dict[str, int] = {}
        for _, d, p in burst:
            by_pool[p] = by_pool.get(p, 0) + d
        pool = max(by_pool, key=lambda p: by_pool[p])
        steps.append(
            Step(
                device=device,
                x_start=x[burst[0][0]],
                x_end=x[burst[-1][0]],
                bytes=net,
                pool=pool,
                graph_pool=pool not in ("0,0", "none", "unknown"),
                segments=sum(1 for _, d, _ in burst if d > 0),
            )
        )
    return steps


def leak_metrics(curve: Curve) -> tuple[int, float, float]:
    """(floor growth B, fraction of slices where the floor rose, steady slope B/s).

    The floor is allocated memory never returned until the end of the trace. The trace is
    cut into ``LEAK_SLICES`` equal slices of x; a slice "rises" when the floor grew by at
    least ``LEAK_SLICE_MIN_BYTES`` in it. The slope uses the *median* slice rise, so a
    one-off start-up (weights, KV cache) adds growth but no slope, while a leak adds both.
    """
    n = len(curve.allocated)
    if n < 2:
        return 0, 0.0, 0.0
    # Outside graph pools only: captured graphs hold their memory by design.
    graph = curve.graph_allocated
    if not graph or graph.count(0) == n:
        outside = curve.allocated
    else:
        outside = list(map(operator.sub, curve.allocated, graph))
    # The floor (the suffix minimum of ``outside``) is read where it is needed only: at the
    # start, the end and each slice's end.
    start_floor = min(min(outside), curve.start_allocated - curve.start_graph_allocated)
    growth = max(0, outside[-1] - start_floor)
    x = curve.x
    x0, x1 = x[0], x[-1]
    if growth == 0 or x1 <= x0:
        return growth, 0.0, 0.0
    ends = []  # per slice, the last index whose x <= its limit, never going back
    j = 0
    ordered = x == sorted(x)
    for k in range(1, LEAK_SLICES + 1):
        limit = x0 + (x1 - x0) * k / LEAK_SLICES
        if ordered:
            j = max(j, bisect.bisect_right(x, limit) - 1)
        else:  # walk on to the first later x above the limit
            above = compress(count(j + 1), map(operator.gt, x[j + 1 :], repeat(limit)))
            j = next(above, n) - 1
        ends.append(j)
    floor_at: dict[int, int] = {}
    low, upper = outside[-1], n
    for j in sorted(set(ends), reverse=True):
        low = min(low, min(outside[j:upper]))
        floor_at[j] = low
        upper = j
    rises = []
    previous = start_floor
    for j in ends:
        rises.append(floor_at[j] - previous)
        previous = floor_at[j]
    fraction = sum(1 for r in rises if r >= LEAK_SLICE_MIN_BYTES) / LEAK_SLICES
    median = sorted(rises)[LEAK_SLICES // 2]
    slice_s = (x1 - x0) / 1e6 / LEAK_SLICES if curve.timed else 0.0
    slope = median / slice_s if slice_s > 0 else 0.0
    return growth, fraction, slope


def downsample(curve: Curve, max_points: int = TIMELINE_MAX_POINTS) -> dict[str, Any]:
    """Equal-width buckets over x keeping each bucket's maximum, so spikes survive."""
    n = len(curve.x)
    graph_pools = sorted(
        (p for p in curve.pools if p not in ("0,0", "none", "unknown")),
        key=lambda p: -max([curve.pools[p][0]] + [v for _, v in curve.pools[p][1]]),
    )[:TIMELINE_MAX_POOLS]
    out: dict[str, Any] = {"x": [], "reserved": [], "allocated": [],
                           "pools": {p: [] for p in graph_pools}}  # fmt: skip
    if n == 0:
        return out
    x0, x1 = curve.x[0], curve.x[-1]
    width = max(1.0, (x1 - x0 + 1) / max_points)
    current = {p: curve.pools[p][0] for p in graph_pools}
    # int((x - x0) / width) for every x, then the runs of equal buckets: where the bucket
    # changes, and the end.
    buckets = list(
        map(int, map(operator.truediv, map(operator.sub, curve.x, repeat(x0)), repeat(width)))
    )
    bounds = list(compress(count(1), map(operator.ne, buckets, islice(buckets, 1, None))))
    bounds.append(n)
    starts = [0, *bounds[:-1]]
    out["x"] = list(map(curve.x.__getitem__, starts))
    for key in ("reserved", "allocated"):
        values = getattr(curve, key)
        peaks = map(max, map(values.__getitem__, map(slice, starts, bounds)))
        out[key] = list(map(max, repeat(0), peaks))
    for p in graph_pools:
        points = curve.pools[p][1]
        best_of = out["pools"][p]
        c = 0
        for j in bounds:
            best = current[p]
            while c < len(points) and points[c][0] < j:
                current[p] = points[c][1]
                best = max(best, current[p])
                c += 1
            best_of.append(best)
    return out


def _is_internal(frame: Frame) -> bool:
    """C/C++ frames, CPython internals and PyTorch's own Python files are not allocation sites."""
    filename, _line, _name = frame
    if not filename.endswith(".py"):
        return True
    return "/torch/" in filename or filename.startswith("torch/")


_CPP_PLUMBING = ("torch::unwind", "torch::CapturedTraceback", "torch::cuda::", "c10::", "at::")


def _site_frames(
    frames: tuple[Frame, ...], internal: dict[str, bool]
) -> tuple[bool, Sequence[Frame]]:
    """(is C++, up to five frames) naming the site of ``frames``: the innermost user Python
    frames; for C++-only stacks (autograd engine), the first frames past the allocator and
    ATen dispatch plumbing. ``internal``: :func:`_is_internal` by file name, shared between
    calls (stacks repeat their files)."""
    user = []
    for f in frames:
        inside = internal.get(f[0])
        if inside is None:
            inside = internal[f[0]] = _is_internal(f)
        if not inside:
            user.append(f)
            if len(user) == 5:
                break
    if user or not frames:
        return False, user
    cpp = list(islice((f for f in frames if not f[2].startswith(_CPP_PLUMBING)), 5))
    return True, cpp or frames[:5]


def _format_frame(cpp: bool, f: Frame) -> str:
    return f"<C++> {f[2][:160]}" if cpp else f"{f[0]}:{f[1]} {f[2]}"


def _site(frames: tuple[Frame, ...]) -> tuple[str, tuple[str, ...]]:
    """The site's name and its formatted stack (up to five frames)."""
    cpp, chosen = _site_frames(frames, {})
    if not chosen:
        return "<no stack recorded>", ()
    stack = tuple(_format_frame(cpp, f) for f in chosen)
    return stack[0], stack


def _site_name(
    frames: tuple[Frame, ...],
    internal: set[Frame],
    user: set[Frame],
    plumbing: set[Frame],
    past: set[Frame],
) -> str:
    """The name :func:`_site` gives ``frames`` (its first frame's), found without walking the
    stack in Python: a C-level scan to the first frame not yet known to be internal, which
    is classified once (each set grows by one frame each time). For C++-only stacks,
    ``plumbing``/``past`` are the frames of the allocator and ATen dispatch / past them."""
    rest = iter(frames)
    while True:
        first = next(filterfalse(internal.__contains__, rest), None)
        if first is None:
            break
        if first in user:
            return _format_frame(False, first)
        if _is_internal(first):
            internal.add(first)
            continue
        user.add(first)
        return _format_frame(False, first)
    if not frames:
        return "<no stack recorded>"
    # C++ only: the first frame past the allocator and ATen plumbing, the same way
    rest = iter(frames)
    while True:
        first = next(filterfalse(plumbing.__contains__, rest), None)
        if first is None:
            return _format_frame(True, frames[0])
        if first in past:
            return _format_frame(True, first)
        if first[2].startswith(_CPP_PLUMBING):
            plumbing.add(first)
            continue
        past.add(first)
        return _format_frame(True, first)


def top_sites(segments: Iterable[Segment], n: int = TOP_SITES) -> tuple[Site, ...]:
    """Largest live-byte sites at the final state, by innermost user frame."""
    cols = _block_columns(list(segments))
    live = list(map(LIVE_STATES.__contains__, cols.states))
    by_frames: dict[int, list[Any]] = {}  # id(frames) -> [frames, bytes, blocks, devices]
    for frames, size, device in zip(
        compress(cols.frames, live),
        compress(cols.allocated, live),
        compress(cols.devices, live),
        strict=True,
    ):
        group = by_frames.get(id(frames))
        if group is None:
            by_frames[id(frames)] = [frames, size, 1, {device}]
        else:
            group[1] += size
            group[2] += 1
            group[3].add(device)
    # Grouped by name; only the winners' stacks are walked beyond their first user frame.
    sites: dict[str, list[Any]] = {}
    internal: set[Frame] = set()
    user: set[Frame] = set()
    plumbing: set[Frame] = set()
    past: set[Frame] = set()
    for frames, total, count_, devs in by_frames.values():
        name = _site_name(frames, internal, user, plumbing, past)
        entry = sites.get(name)
        if entry is None:
            sites[name] = [total, count_, devs, frames]
        else:
            entry[0] += total
            entry[1] += count_
            entry[2] |= devs
    ranked = sorted(sites.items(), key=lambda kv: -kv[1][0])[:n]
    out = []
    cache: dict[str, bool] = {}
    for name, (total, count_, devs, frames) in ranked:
        cpp, chosen = _site_frames(frames, cache)
        stack = tuple(_format_frame(cpp, f) for f in chosen)
        out.append(Site(name, total, count_, tuple(sorted(devs)), stack))
    return tuple(out)


def _ooms(device: int, entries: Sequence[TraceEntry], curve: Curve) -> tuple[Oom, ...]:
    out: list[Oom] = []
    actions = entries.action if isinstance(entries, Trace) else [e.action for e in entries]
    if "oom" not in actions:
        return ()
    for i in compress(count(), map(operator.eq, actions, repeat("oom"))):
        e = entries[i]
        out.append(Oom(device, curve.x[i], e.time_us, e.size, e.device_free or 0,
                       curve.reserved[i], curve.allocated[i]))  # fmt: skip
    return tuple(out)


def analyse_device(
    device: int, segs: Sequence[Segment], entries: Sequence[TraceEntry]
) -> DeviceAnalysis:
    final = _final_state(segs)
    index = _PoolIndex(segs)
    curve = reconstruct(
        entries,
        final["reserved"],
        final["allocated"],
        final["pools"],
        index,
        final["graph_allocated"],
    )
    timed = curve.timed
    growth, fraction, slope = leak_metrics(curve)
    graph_start = sum(
        start for p, (start, _) in curve.pools.items() if p not in ("0,0", "none", "unknown")
    )
    span_s = (curve.x[-1] - curve.x[0]) / 1e6 if timed and curve.x else 0.0
    return DeviceAnalysis(
        device=device,
        segments=len(segs),
        reserved_bytes=final["reserved"],
        allocated_bytes=final["allocated"],
        allocated_rounded_bytes=final["rounded"],
        segsum_allocated_bytes=final["segsum_allocated"],
        free_internal_bytes=final["free_internal"],
        free_external_bytes=final["free_external"],
        graph_pool_bytes=final["graph"],
        pools=final["pools"],
        trace_entries=len(entries),
        x_unit="time_us" if timed else "event",
        span_s=span_s,
        start_reserved_bytes=curve.start_reserved,
        start_allocated_bytes=curve.start_allocated,
        graph_pool_start_bytes=graph_start,
        allocated_growth_bytes=growth,
        leak_fraction=fraction,
        allocated_slope_bytes_per_s=slope,
        steps=tuple(find_steps(device, curve, timed)),
        ooms=_ooms(device, entries, curve),
        timeline=downsample(curve),
        pools_unknown_events=sum(1 for _, _, p in curve.seg_events if p == "unknown"),
    )


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def findings(devices: Sequence[DeviceAnalysis]) -> list[dict[str, Any]]:
    out = []
    pool_bytes = sum(d.graph_pool_bytes for d in devices)
    pool_growth = sum(max(0, d.graph_pool_growth_bytes) for d in devices)
    pool_steps = [s for d in devices for s in d.steps if s.graph_pool]
    if (
        pool_bytes >= GRAPH_POOL_FINDING_BYTES
        and pool_growth >= GRAPH_POOL_GROWTH_FINDING_BYTES
        and pool_steps
    ):
        out.append({
            "key": "cuda-graph-pool-growth",
            "title": f"CUDA-graph pools grew by {_gib(pool_growth)} during the trace",
            "detail": (
                f"Private (graph) pools hold {_gib(pool_bytes)} at the end; reserved memory "
                f"stepped up {len(pool_steps)} time(s) in graph pools (largest "
                f"{_gib(max(s.bytes for s in pool_steps))}). Graphs captured after warm-up "
                "keep their pool reserved for their lifetime."
            ),
            "values": {
                "graph_pool_bytes": pool_bytes,
                "graph_pool_growth_bytes": pool_growth,
                "graph_pool_steps": len(pool_steps),
                "step_bytes": [s.bytes for s in pool_steps],
                "step_x": [s.x_start for s in pool_steps],
                "pools": sorted({s.pool for s in pool_steps}),
            },
        })  # fmt: skip
    leaking = [
        d for d in devices
        if d.allocated_slope_bytes_per_s >= LEAK_FINDING_SLOPE_BYTES_PER_S
        and d.leak_fraction >= LEAK_FINDING_FRACTION
        and d.span_s >= LEAK_FINDING_MIN_SPAN_S
    ]  # fmt: skip
    if leaking:
        worst = max(leaking, key=lambda d: d.allocated_slope_bytes_per_s)
        out.append({
            "key": "allocator-leak",
            "title": f"Allocated memory only grows: "
                     f"{worst.allocated_slope_bytes_per_s / MiB:.1f} MiB/s never returned",
            "detail": (
                f"On device {worst.device} the allocated floor (bytes never freed again) "
                f"rose in {worst.leak_fraction:.0%} of the {worst.span_s:.0f} s trace's slices "
                f"({_gib(worst.allocated_growth_bytes)} in all): tensors are kept alive."
            ),
            "values": {
                "devices": [d.device for d in leaking],
                "allocated_growth_bytes": worst.allocated_growth_bytes,
                "leak_fraction": worst.leak_fraction,
                "slope_bytes_per_s": worst.allocated_slope_bytes_per_s,
                "span_s": worst.span_s,
            },
        })  # fmt: skip
    ooms = [o for d in devices for o in d.ooms]
    if ooms:
        last = ooms[-1]
        out.append({
            "key": "oom",
            "title": f"CUDA out of memory: {_gib(last.requested_bytes)} requested, "
                     f"{_gib(last.device_free_bytes)} free",
            "detail": (
                f"{len(ooms)} OOM event(s); at the last one device {last.device} had "
                f"{_gib(last.reserved_bytes)} reserved and {_gib(last.allocated_bytes)} allocated."
            ),
            "values": {"count": len(ooms), **last.as_dict()},
        })  # fmt: skip
    return out


def signals(devices: Sequence[DeviceAnalysis]) -> dict[str, float]:
    worst = max(devices, key=lambda d: d.allocated_growth_bytes, default=None)
    steps = [s for d in devices for s in d.steps]
    reserved = sum(d.reserved_bytes for d in devices)
    allocated = sum(d.allocated_bytes for d in devices)
    return {
        "artifact_reserved_bytes": reserved,
        "artifact_allocated_bytes": allocated,
        "artifact_graph_pool_bytes": sum(d.graph_pool_bytes for d in devices),
        "artifact_graph_pool_growth_bytes": sum(d.graph_pool_growth_bytes for d in devices),
        "artifact_reserved_step_count": len(steps),
        "artifact_reserved_step_max_bytes": max((s.bytes for s in steps), default=0),
        "artifact_allocated_growth_bytes": worst.allocated_growth_bytes if worst else 0,
        "artifact_leak_fraction": worst.leak_fraction if worst else 0.0,
        "artifact_allocated_slope_bytes_per_s": worst.allocated_slope_bytes_per_s if worst else 0.0,
        "artifact_oom_count": sum(len(d.ooms) for d in devices),
        "artifact_reserved_gap_bytes": reserved - allocated,
        "artifact_trace_entries": sum(d.trace_entries for d in devices),
        "artifact_trace_span_s": max((d.span_s for d in devices), default=0.0),
    }


def analyse_snapshot(snapshot: Snapshot) -> MemoryAnalysis:
    """Final state, backward timeline, steps, leak metrics, top sites, OOMs and findings."""
    devices = []
    for dev in snapshot.devices:
        segs = [s for s in snapshot.segments if s.device == dev]
        entries = snapshot.device_traces[dev] if dev < len(snapshot.device_traces) else Trace.of(())
        devices.append(analyse_device(dev, segs, entries))
    devs = tuple(devices)
    return MemoryAnalysis(
        layout=snapshot.layout,
        devices=devs,
        top_sites=top_sites(snapshot.segments),
        findings=tuple(findings(devs)),
        signals=signals(devs),
    )
