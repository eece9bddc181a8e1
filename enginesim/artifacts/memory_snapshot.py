"""Simulated ``torch.cuda.memory._snapshot()`` dumps for Atlas TP ranks.

A real snapshot is the allocator's *final* segment/block state plus a ring buffer holding
only the newest ``max_entries`` trace events, so the start of history is usually gone and
tools must rebuild reserved/allocated over time by walking the trace backwards from the
segments (``MemoryViz.js`` does this). The generator therefore models a small caching
allocator (2 MiB / 20 MiB segment rules, block splitting and coalescing) and applies the
rank's life story to it: weights, vLLM's profile run and ``empty_cache``, the KV cache,
CUDA-graph captures into private pools, steady activation churn, leaks, and an OOM. The
final segments and every kept trace entry come from the same model, so a correct backward
reconstruction is exact.

Churn is not materialised for the whole run (48 hours of 50 ms steps would be millions of
events): it nets to zero per step, so only the steps that land in the ring buffer are
generated and merged with the structural events.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice

from .records import DEFAULT_EPOCH_UNIX, GraphCapture, RankMemory
from .snapshot_frames import Frame, FrameBook

MiB = 1 << 20
GiB = 1 << 30
_MIN_BLOCK = 512
_SMALL_SIZE = 1 * MiB  # requests up to this go to the small pool
_SMALL_SEGMENT = 2 * MiB
_LARGE_SEGMENT = 20 * MiB  # kLargeBuffer, used for 1-10 MiB requests
_MIN_LARGE_ALLOC = 10 * MiB
_ROUND_LARGE = 2 * MiB
_DEFAULT_POOL = (0, 0)
_WARMUP_POOL = (0, 1)  # vLLM's global graph pool: the first graph_pool_handle()
STARTUP_SPAN_S = 30.0  # longest start-up (load weights, profile, allocate KV) before serving

# Llama-70B-shaped TP4 shard, in bytes per rank; scaled to the rank's weights_bytes.
_LAYER_TENSORS = (
    ("input_layernorm", 16_384),
    ("qkv_proj", 41_943_040),
    ("o_proj", 33_554_432),
    ("post_attention_layernorm", 16_384),
    ("gate_up_proj", 234_881_024),
    ("down_proj", 117_440_512),
)
_EMBED_BYTES = 525_336_576
_NUM_LAYERS = 80
_EVENTS_PER_STEP = 6  # activation churn: 2 x (alloc, free_requested, free_completed)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _block_size(requested: int) -> int:
    return max(_MIN_BLOCK, _round_up(requested, _MIN_BLOCK))


def _segment_size(block: int) -> int:
    if block <= _SMALL_SIZE:
        return _SMALL_SEGMENT
    if block < _MIN_LARGE_ALLOC:
        return _LARGE_SEGMENT
    return _round_up(block, _ROUND_LARGE)


@dataclass(slots=True)
class _Block:
    offset: int
    size: int
    requested: int = 0
    allocated: bool = False
    frames: list[Frame] = field(default_factory=list)


@dataclass(slots=True)
class _Segment:
    address: int
    total: int
    segment_type: str
    pool: tuple[int, int]
    frames: list[Frame]
    blocks: list[_Block]
    alive: bool = True


@dataclass(frozen=True)
class OomDetails:
    """Numbers a torch OOM message and the ``oom`` trace entry agree on."""

    device: int
    time_s: float
    requested_bytes: int
    device_free_bytes: int
    total_bytes: int
    reserved_bytes: int
    allocated_bytes: int
    private_pool_allocated_bytes: int
    non_torch_bytes: int

    @property
    def process_in_use_bytes(self) -> int:
        return self.reserved_bytes + self.non_torch_bytes


class _Allocator:
    """Just enough of CUDACachingAllocator to produce consistent segments and events."""

    def __init__(self, device: int, epoch_us: int, frames: FrameBook, with_time: bool) -> None:
        self.device = device
        self.epoch_us = epoch_us
        self.frames = frames
        self.with_time = with_time
        self.events: list[dict] = []
        self.segments: list[_Segment] = []
        self.next_addr = 0x7F2A00000000 + device * 0x2000000000
        self.last_us = -(1 << 62)
        self.reserved = 0
        self.allocated = 0
        # (time_us, reserved, allocated) after each structural event: the intended totals.
        self.history: list[tuple[int, int, int]] = []

    def us(self, t_s: float) -> int:
        t = self.epoch_us + round(t_s * 1e6)
        self.last_us = max(self.last_us + 1, t)
        return self.last_us

    def _emit(self, action: str, addr: int, size: int, t_us: int, frames: list[Frame]) -> None:
        entry: dict = {"action": action, "addr": addr, "size": size, "stream": 0}
        if self.with_time:
            entry["time_us"] = t_us
        entry["frames"] = frames
        self.events.append(entry)
        self.history.append((t_us, self.reserved, self.allocated))

    def new_segment(
        self, t_us: int, size: int, pool: tuple[int, int], frames: list[Frame]
    ) -> _Segment:
        seg = _Segment(
            address=self.next_addr,
            total=size,
            segment_type="small" if size == _SMALL_SEGMENT else "large",
            pool=pool,
            frames=frames,
            blocks=[_Block(0, size)],
        )
        self.next_addr += _round_up(size, _ROUND_LARGE) + _ROUND_LARGE
        self.segments.append(seg)
        self.reserved += size
        self._emit("segment_alloc", seg.address, size, t_us, frames)
        return seg

    def alloc_in(self, seg: _Segment, t_us: int, requested: int, frames: list[Frame]) -> _Block:
        need = _block_size(requested)
        for i, blk in enumerate(seg.blocks):
            if not blk.allocated and blk.size >= need:
                rest = blk.size - need
                split_min = _MIN_BLOCK if seg.segment_type == "small" else _SMALL_SIZE + 1
                if rest >= split_min:
                    seg.blocks.insert(i + 1, _Block(blk.offset + need, rest))
                    blk.size = need
                blk.allocated, blk.requested, blk.frames = True, requested, frames
                self.allocated += requested
                self._emit("alloc", seg.address + blk.offset, requested, t_us, frames)
                return blk
        raise ValueError(f"segment {seg.address:#x} has no room for {requested} bytes")

    def alloc(
        self, t_us: int, requested: int, kind: str, pool: tuple[int, int] = _DEFAULT_POOL
    ) -> tuple[_Segment, _Block]:
        frames = self.frames.get("malloc", kind)
        seg = self.new_segment(t_us, _segment_size(_block_size(requested)), pool, frames)
        return seg, self.alloc_in(seg, t_us, requested, frames)

    def free(self, t_us: int, seg: _Segment, blk: _Block, kind: str) -> None:
        frames = self.frames.get("free", kind)
        addr = seg.address + blk.offset
        self._emit("free_requested", addr, blk.requested, t_us, frames)
        self.allocated -= blk.requested
        blk.allocated, blk.requested, blk.frames = False, 0, []
        self._emit("free_completed", addr, 0, t_us, frames)
        self.events[-1]["size"] = self.events[-2]["size"]
        merged: list[_Block] = []
        for b in seg.blocks:
            if merged and not b.allocated and not merged[-1].allocated:
                merged[-1].size += b.size
            else:
                merged.append(b)
        seg.blocks = merged

    def release(self, t_us: int, seg: _Segment, op: str, kind: str) -> None:
        assert seg.alive and not any(b.allocated for b in seg.blocks)
        seg.alive = False
        self.reserved -= seg.total
        self._emit("segment_free", seg.address, seg.total, t_us, self.frames.get(op, kind))


@dataclass
class _Plan:
    """Structural history of one rank plus what churn needs to fill the ring buffer."""

    alloc: _Allocator
    churn_segments: tuple[_Segment, ...]
    churn_start_us: int
    churn_steps: int
    churn_interval_us: int
    oom: OomDetails | None


def _weight_sizes(weights_bytes: int) -> list[int]:
    """Per-tensor shard sizes summing exactly to ``weights_bytes``."""
    if weights_bytes <= 0:
        return []
    layers = max(1, min(_NUM_LAYERS, weights_bytes // (256 * MiB)))
    template = [_EMBED_BYTES]
    for _ in range(layers):
        template += [size for _, size in _LAYER_TENSORS]
    template += [16_384, _EMBED_BYTES]  # final norm, lm_head
    scale = weights_bytes / sum(template)
    sizes = [max(2, int(s * scale) // 2 * 2) for s in template]
    sizes[-1] += weights_bytes - sum(sizes)
    return [s for s in sizes if s > 0]


def _split(total: int, parts: int) -> list[int]:
    base = total // parts
    return [base] * (parts - 1) + [total - base * (parts - 1)]


def _plan(
    rank: RankMemory,
    *,
    epoch_unix: float,
    churn_interval_s: float | None,
    non_torch_bytes: int,
    startup_s: float | None,
    max_entries: int,
    with_time: bool = True,
) -> _Plan:
    book = FrameBook()
    a = _Allocator(rank.device, round(epoch_unix * 1e6), book, with_time)
    end_s = rank.now_s if rank.oom_at_s is None else min(rank.oom_at_s, rank.now_s)
    captures = sorted(
        (c for c in rank.graph_captures if c.time_s <= end_s),
        key=lambda c: (c.time_s, not c.after_warmup),
    )
    warm = [c for c in captures if not c.after_warmup]
    if startup_s is None:
        later = [c.time_s for c in captures] + [t for t, _ in rank.leaked_bytes] + [end_s]
        startup_s = warm[0].time_s if warm else min(60.0, max(1.0, 0.5 * min(later)))
    # Start-up (weights, profile run, KV cache) takes at most STARTUP_SPAN_S before it is
    # finished: a process restarted at t = 434 s began loading at ~404 s, not at 0 (its
    # allocator history starts with the process; a leak after a restart is most of it).
    span = min(startup_s, STARTUP_SPAN_S) if startup_s > 1.0 else STARTUP_SPAN_S
    t0 = startup_s - span
    ops: list[tuple[float, int, Callable[[], None]]] = []

    def at(t: float, fn: Callable[[], None]) -> None:
        ops.append((t, len(ops), fn))

    sizes = _weight_sizes(rank.weights_bytes)
    small: list[_Segment] = []

    def load_weights() -> None:
        kind = "weights"
        for i, size in enumerate(sizes):
            t_us = a.us(t0 + span * 0.05 + span * 0.2 * i / len(sizes))
            if _block_size(size) <= _SMALL_SIZE:
                # Norm weights share 2 MiB small segments, as the small pool packs them.
                frames = book.get("malloc", kind)
                room = (
                    max((b.size for b in small[-1].blocks if not b.allocated), default=0)
                    if small
                    else 0
                )
                if not room or room < _block_size(size):
                    small.append(a.new_segment(t_us, _SMALL_SEGMENT, _DEFAULT_POOL, frames))
                a.alloc_in(small[-1], t_us, size, frames)
            else:
                a.alloc(t_us, size, kind)

    def profile_run() -> None:
        t = t0 + span * 0.7
        live = [a.alloc(a.us(t), part, "profile") for part in _split(rank.activation_peak_bytes, 4)]
        for seg, blk in live:
            a.free(a.us(t + 0.05), seg, blk, "profile")
        for seg, _ in live:  # vLLM calls torch.cuda.empty_cache() after profiling
            a.release(a.us(t + 0.3), seg, "empty_cache", "empty_cache")

    def kv_cache() -> None:
        t = t0 + span * 0.85
        layers = max(1, min(_NUM_LAYERS, rank.kv_pool_bytes // (64 * MiB)))
        for part in _split(rank.kv_pool_bytes, layers):
            a.alloc(a.us(t), part, "kv_cache")

    at(t0, load_weights)
    if rank.activation_peak_bytes > 0:
        at(t0 + span * 0.7, profile_run)
    if rank.kv_pool_bytes > 0:
        at(t0 + span * 0.85, kv_cache)

    next_pool = [_WARMUP_POOL[1] + 1]

    def capture(c: GraphCapture) -> None:
        if c.after_warmup:
            pool = (0, next_pool[0])  # an on-the-fly capture gets its own private pool
            next_pool[0] += 1
            kind = "capture_late"
        else:
            pool, kind = _WARMUP_POOL, "capture"
        if c.pool_bytes <= 0:
            return
        t_us = a.us(c.time_s)
        frames = book.get("malloc", kind)
        main = _round_up(max(_MIN_BLOCK, c.pool_bytes * 3 // 4), _ROUND_LARGE)
        rest = c.pool_bytes - main
        seg_a = a.new_segment(t_us, main, pool, frames)
        # The graph's static output stays allocated; intermediates are freed back into
        # the private pool, which keeps them reserved for replays.
        a.alloc_in(seg_a, a.us(c.time_s), max(_MIN_BLOCK, main // 16), frames)
        temps = [(seg_a, a.alloc_in(seg_a, a.us(c.time_s), max(_MIN_BLOCK, main // 2), frames))]
        if rest > 0:
            seg_b = a.new_segment(a.us(c.time_s), _round_up(rest, _ROUND_LARGE), pool, frames)
            temps.append((seg_b, a.alloc_in(seg_b, a.us(c.time_s), rest, frames)))
        for seg, blk in temps:
            a.free(a.us(c.time_s + 1e-4), seg, blk, kind)

    for c in captures:
        at(c.time_s, functools.partial(capture, c))

    serve_s = max([startup_s, *(c.time_s for c in warm)]) + 0.5
    if churn_interval_s is None:
        # Stretch the cadence so the ring buffer just covers the serving period: every
        # serve-time jump stays visible while start-up history still falls off the front.
        churn_interval_s = (end_s - serve_s) / max(1, max_entries // _EVENTS_PER_STEP - 1)
    interval = max(churn_interval_s, 5e-3)
    churn_steps = math.floor((end_s - serve_s) / interval) if end_s > serve_s else 0
    churn: list[_Segment] = []
    churn_t0 = [0]

    def serve_start() -> None:
        frames = book.get("malloc", "forward")
        t_us = churn_t0[0] = a.us(serve_s)
        for part in (rank.activation_peak_bytes * 3 // 5, rank.activation_peak_bytes * 2 // 5):
            churn.append(
                a.new_segment(t_us, _segment_size(_block_size(part)), _DEFAULT_POOL, frames)
            )

    if churn_steps > 0 and rank.activation_peak_bytes > 0:
        at(serve_s, serve_start)
    else:
        churn_steps = 0

    leak_segments: dict[str, list[_Segment]] = {"small": [], "large": []}

    def leak(t: float, nbytes: int) -> None:
        frames = book.get("malloc", "leak")
        t_us = a.us(t)
        need = _block_size(nbytes)
        pool_kind = "small" if need <= _SMALL_SIZE else "large"
        segs = leak_segments[pool_kind]
        if segs and need < _MIN_LARGE_ALLOC:
            free = max((b.size for b in segs[-1].blocks if not b.allocated), default=0)
            if free >= need:
                a.alloc_in(segs[-1], t_us, nbytes, frames)
                return
        seg = a.new_segment(t_us, _segment_size(need), _DEFAULT_POOL, frames)
        segs.append(seg)
        a.alloc_in(seg, t_us, nbytes, frames)

    previous = 0
    for t, cumulative in sorted(rank.leaked_bytes):
        if cumulative < previous:
            raise ValueError("leaked_bytes must be cumulative (non-decreasing)")
        if cumulative > previous and t <= end_s:
            at(t, functools.partial(leak, t, cumulative - previous))
        previous = cumulative

    oom: list[OomDetails] = []

    def out_of_memory() -> None:
        assert rank.oom_at_s is not None
        t_us = a.us(rank.oom_at_s)
        # A failed cudaMalloc first returns every fully free cached segment, then retries.
        for seg in churn:
            a.release(t_us, seg, "oom_release", "forward")
        private = sum(
            b.requested
            for s in a.segments
            if s.alive and s.pool != _DEFAULT_POOL
            for b in s.blocks
            if b.allocated
        )
        free = max(0, rank.total_bytes - a.reserved - non_torch_bytes)
        requested = _round_up(
            max(rank.activation_peak_bytes // 2, free + _LARGE_SEGMENT), _ROUND_LARGE
        )
        entry: dict = {"action": "oom", "device_free": free, "size": requested, "stream": 0}
        if a.with_time:
            entry["time_us"] = t_us
        entry["frames"] = book.get("malloc", "forward")
        a.events.append(entry)
        a.history.append((t_us, a.reserved, a.allocated))
        oom.append(
            OomDetails(
                device=rank.device,
                time_s=rank.oom_at_s,
                requested_bytes=requested,
                device_free_bytes=free,
                total_bytes=rank.total_bytes,
                reserved_bytes=a.reserved,
                allocated_bytes=a.allocated,
                private_pool_allocated_bytes=private,
                non_torch_bytes=non_torch_bytes,
            )
        )

    if rank.oom_at_s is not None and rank.oom_at_s <= rank.now_s:
        at(rank.oom_at_s, out_of_memory)

    for _t, _order, fn in sorted(ops, key=lambda op: (op[0], op[1])):
        fn()

    return _Plan(
        alloc=a,
        churn_segments=tuple(churn),
        churn_start_us=churn_t0[0] + 1000 if churn else 0,
        churn_steps=churn_steps,
        churn_interval_us=round(interval * 1e6),
        oom=oom[0] if oom else None,
    )


@dataclass(frozen=True)
class _ChurnStep:
    alloc_a_us: int
    alloc_b_us: int
    free_b_us: int
    free_a_us: int
    size_a: int
    size_b: int


def _churn_step(plan: _Plan, k: int) -> _ChurnStep:
    """Serving step ``k``: two activation buffers, allocated then freed within the step."""
    seg_a, seg_b = plan.churn_segments
    step = plan.churn_interval_us
    t = plan.churn_start_us + k * step
    frac = ((k * 2654435761) & 0xFFFFFFFF) / 2**32  # deterministic per-step batch size
    size_a = max(_MIN_BLOCK, int(seg_a.total * (0.35 + 0.6 * frac)) // _MIN_BLOCK * _MIN_BLOCK)
    size_b = max(_MIN_BLOCK, int(seg_b.total * (0.95 - 0.6 * frac)) // _MIN_BLOCK * _MIN_BLOCK)
    return _ChurnStep(
        alloc_a_us=t + step // 20,
        alloc_b_us=t + step * 3 // 20,
        free_b_us=t + step * 8 // 20,
        free_a_us=t + step * 9 // 20,
        size_a=size_a,
        size_b=size_b,
    )


def _churn_events(plan: _Plan) -> Iterator[dict]:
    """Activation alloc/free events of every serving step, newest first."""
    if not plan.churn_steps:
        return
    seg_a, seg_b = plan.churn_segments
    alloc_frames = plan.alloc.frames.get("malloc", "forward")
    free_frames = plan.alloc.frames.get("free", "forward")
    for k in range(plan.churn_steps - 1, -1, -1):
        c = _churn_step(plan, k)
        newest_first = (
            ("free_completed", seg_a, c.size_a, c.free_a_us, free_frames),
            ("free_requested", seg_a, c.size_a, c.free_a_us, free_frames),
            ("free_completed", seg_b, c.size_b, c.free_b_us, free_frames),
            ("free_requested", seg_b, c.size_b, c.free_b_us, free_frames),
            ("alloc", seg_b, c.size_b, c.alloc_b_us, alloc_frames),
            ("alloc", seg_a, c.size_a, c.alloc_a_us, alloc_frames),
        )
        for action, seg, size, t_us, frames in newest_first:
            yield {
                "action": action,
                "addr": seg.address,
                "size": size,
                "stream": 0,
                "time_us": t_us,
                "frames": frames,
            }


def _churn_allocated(plan: _Plan, at_us: int) -> int:
    """Bytes the serving step running at ``at_us`` holds (0 between steps)."""
    if not plan.churn_steps or at_us < plan.churn_start_us:
        return 0
    k = (at_us - plan.churn_start_us) // plan.churn_interval_us
    if k >= plan.churn_steps:
        return 0
    c = _churn_step(plan, k)
    live = c.size_a if c.alloc_a_us <= at_us < c.free_a_us else 0
    return live + (c.size_b if c.alloc_b_us <= at_us < c.free_b_us else 0)


def _ring_buffer(plan: _Plan, max_entries: int) -> list[dict]:
    """The newest ``max_entries`` events, oldest first, as torch's ring buffer keeps them."""
    if max_entries <= 0:
        return []
    newest_first = heapq.merge(
        reversed(plan.alloc.events), _churn_events(plan), key=lambda e: -e["time_us"]
    )
    kept = list(islice(newest_first, max_entries))
    kept.reverse()
    return kept


def _segment_dict(device: int, seg: _Segment) -> dict:
    blocks = []
    allocated = requested = 0
    for b in seg.blocks:
        if b.allocated:
            allocated += b.size
            requested += b.requested
        blocks.append(
            {
                "address": seg.address + b.offset,
                "size": b.size,
                "requested_size": b.requested,
                "state": "active_allocated" if b.allocated else "inactive",
                "frames": b.frames,
            }
        )
    return {
        "device": device,
        "address": seg.address,
        "total_size": seg.total,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": requested,
        "stream": 0,
        "segment_type": seg.segment_type,
        "segment_pool_id": seg.pool,
        "is_expandable": False,
        "frames": seg.frames,
        "blocks": blocks,
    }


def _torch_version(version: str) -> tuple[int, int]:
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        raise ValueError(f"torch_version must look like '2.5', got {version!r}") from None
    if (major, minor) < (2, 1):
        raise ValueError("torch < 2.1 (legacy 'history' block layout) is not generated")
    return major, minor


def _allocator_settings(version: tuple[int, int]) -> dict:
    settings: dict = {
        "PYTORCH_CUDA_ALLOC_CONF": "",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
    }
    if version >= (2, 9):
        settings["graph_capture_record_stream_reuse"] = False
    return settings


def _as_ranks(ranks: RankMemory | Sequence[RankMemory]) -> list[RankMemory]:
    out = [ranks] if isinstance(ranks, RankMemory) else list(ranks)
    devices = [r.device for r in out]
    if len(set(devices)) != len(devices):
        raise ValueError(f"one RankMemory per device please, got devices {devices}")
    return out


def build_memory_snapshot(
    ranks: RankMemory | Sequence[RankMemory],
    *,
    max_entries: int = 100000,
    torch_version: str = "2.5",
    epoch_unix: float = DEFAULT_EPOCH_UNIX,
    churn_interval_s: float | None = 0.05,
    non_torch_bytes: int = 3 * GiB // 2,
    startup_s: float | None = None,
    device_count: int | None = None,
) -> dict:
    """The dict ``torch.cuda.memory._snapshot()`` returns, for one or more ranks' devices.

    ``max_entries`` is the per-device ring-buffer size passed to
    ``_record_memory_history``. ``churn_interval_s`` is the serving step cadence used for
    activation churn; None stretches it so the buffer spans exactly the serving period (at
    the realistic 0.05 s a 100k buffer reaches back only ~14 minutes). ``non_torch_bytes``
    (CUDA context, NCCL, cuBLAS workspaces) only affects the ``device_free`` an OOM
    reports. ``startup_s`` pins when start-up (weights, profile run, KV cache) is
    finished; by default it is the first warm-up capture.
    """
    version = _torch_version(torch_version)
    rank_list = _as_ranks(ranks)
    count = device_count or max((r.device for r in rank_list), default=-1) + 1
    traces: list[list[dict]] = [[] for _ in range(count)]
    segments: list[dict] = []
    for rank in sorted(rank_list, key=lambda r: r.device):
        plan = _plan(
            rank,
            epoch_unix=epoch_unix,
            churn_interval_s=churn_interval_s,
            non_torch_bytes=non_torch_bytes,
            startup_s=startup_s,
            max_entries=max_entries,
        )
        entries = _ring_buffer(plan, max_entries)
        if version < (2, 2):  # time_us entered TraceEntry in 2.2
            entries = [{k: v for k, v in e.items() if k != "time_us"} for e in entries]
        traces[rank.device] = entries
        alive = sorted((s for s in plan.alloc.segments if s.alive), key=lambda s: s.address)
        segments += [_segment_dict(rank.device, s) for s in alive]
    snapshot: dict = {"segments": segments, "device_traces": traces}
    if version >= (2, 3):
        snapshot["allocator_settings"] = _allocator_settings(version)
    if version >= (2, 5):
        snapshot["external_annotations"] = []
    return snapshot


def dump_memory_snapshot(
    ranks: RankMemory | Sequence[RankMemory], *, protocol: int = 4, **kw
) -> bytes:
    """Bytes of ``torch.cuda.memory._dump_snapshot()``: a pickle of plain data only.

    Protocol 4 is what ``_dump_snapshot`` writes on Python 3.8-3.13 (3.14 defaults to 5).
    """
    if not 2 <= protocol <= 5:
        raise ValueError("snapshot pickles use protocol 2-5")
    return pickle.dumps(build_memory_snapshot(ranks, **kw), protocol=protocol)


def expected_totals(
    rank: RankMemory,
    at_s: float,
    *,
    epoch_unix: float = DEFAULT_EPOCH_UNIX,
    churn_interval_s: float | None = 0.05,
    non_torch_bytes: int = 3 * GiB // 2,
    startup_s: float | None = None,
    max_entries: int = 100000,
) -> tuple[int, int]:
    """Intended ``(reserved, allocated)`` bytes after every event at or before ``at_s``.

    ``allocated`` is the viewer's figure (sum of requested sizes of live blocks), including
    the serving step in flight. This is the ground truth a backward reconstruction of the
    snapshot must reproduce; pass the same keywords as to ``build_memory_snapshot``.
    """
    plan = _cached_plan(
        rank,
        epoch_unix=epoch_unix,
        churn_interval_s=churn_interval_s,
        non_torch_bytes=non_torch_bytes,
        startup_s=startup_s,
        max_entries=max_entries,
    )
    return _totals_at(plan, round(epoch_unix * 1e6) + round(at_s * 1e6))


# Analysis helpers ask for totals at thousands of instants; re-planning each time would be
# quadratic. Only these read-only callers share cached plans: build_memory_snapshot always
# plans afresh so the dicts it hands out are never aliased with the cache.
_cached_plan = functools.lru_cache(maxsize=8)(_plan)


def _totals_at(plan: _Plan, at_us: int) -> tuple[int, int]:
    history = plan.alloc.history
    i = bisect.bisect_right(history, at_us, key=lambda h: h[0])
    reserved, allocated = (history[i - 1][1], history[i - 1][2]) if i else (0, 0)
    return reserved, allocated + _churn_allocated(plan, at_us)


def oom_details(
    rank: RankMemory,
    *,
    epoch_unix: float = DEFAULT_EPOCH_UNIX,
    churn_interval_s: float | None = 0.05,
    non_torch_bytes: int = 3 * GiB // 2,
    startup_s: float | None = None,
    max_entries: int = 100000,
) -> OomDetails | None:
    """The failed allocation's numbers, so log lines can quote what the snapshot records."""
    return _cached_plan(
        rank,
        epoch_unix=epoch_unix,
        churn_interval_s=churn_interval_s,
        non_torch_bytes=non_torch_bytes,
        startup_s=startup_s,
        max_entries=max_entries,
    ).oom
