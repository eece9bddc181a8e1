"""What a Kineto Chrome trace says about an inference engine's steps (pure functions).

Input is the compact ``ChromeTrace`` from ``artifacts.chrome_trace``; nothing here reads
files. Definitions follow HolisticTraceAnalysis (HTA) where HTA has one, so numbers can be
compared with an HTA notebook on the same file:

* GPU activities = kernels, memcpys and memsets (HTA: rows with ``stream != -1``).
* Kernel kinds by name: communication ``^nccl|^hip|^hccl|ncclKernel``, memory
  ``^(hip)?Memcpy|^(hip)?Memset|^dma``, computation = the rest (minus ``*Sync``/launch rows).
* Temporal breakdown: ``kernel_time`` = last end - first start of all activities;
  ``idle`` = kernel_time - union of busy intervals; ``compute`` = union of computation
  kernels; ``non_compute`` = kernel_time - compute - idle.
* Idle per stream: a gap before a kernel is ``host_wait`` when the kernel's launching runtime
  call started after the previous kernel ended, ``kernel_wait`` when shorter than 30 us,
  else ``other``.
* Comm/comp overlap = time computing while communicating / time communicating.
Unlike HTA this does not drop kernels of the last ProfilerStep; it reports all of them.

Steps: ``ProfilerStep#N`` CPU spans (or, when a trace has none, the engine's step
annotations). A GPU activity belongs to the step in which its launch call started (its own
start when no launch is linked). The step's composition comes from the engine annotation
inside it: vLLM ``execute_new_{n}_cached_{m}`` (request counts only), SGLang
``step[EXTEND bs=.. toks=..]`` / ``step[DECODE bs=..]`` and TraceLens
``execute_{tokens}_context_{c}(sq{prefill}..)_generation_{g}(..)`` (token counts). vLLM's
annotation has no token count; with tensor parallelism the per-step all-reduce size
(``In msg nelems`` = tokens x hidden size) gives it, with the hidden size taken from
decode-only steps (``tokens_source: "allreduce-estimate"``).

Signals (flat numbers for playbooks; a signal is absent when the trace cannot give it):

* ``artifact_step_count`` - steps analysed (count)
* ``artifact_step_p50_ms``, ``artifact_step_p99_ms``, ``artifact_step_max_ms`` - step
  duration percentiles (milliseconds)
* ``artifact_decode_step_p50_ms`` - median duration of decode-only steps (ms)
* ``artifact_max_new_tokens_per_step`` - largest prefill token count in one step (tokens)
* ``artifact_prefill_step_excess_ms`` - GPU-busy time of the busiest prefill-bearing step
  minus the median decode-only step's (ms; a host stall inside a step is not prefill work)
* ``artifact_prefill_ms_per_1k_tokens`` - median extra step time per 1,000 prefill tokens
  of the steps above the threshold (ms)
* ``artifact_gpu_idle_fraction`` - HTA idle / kernel_time (0-1)
* ``artifact_gpu_compute_fraction`` - HTA compute / kernel_time (0-1)
* ``artifact_comm_overlap_fraction`` - HTA comm/comp overlap (0-1; absent without comm)
* ``artifact_graph_launch_fraction`` - GPU kernels (not memcpy/memset) launched by CUDA/HIP
  graph replays over all kernels with a linked launch (0-1)
"""

from __future__ import annotations

import bisect
import math
import re
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from artifacts.chrome_trace import (
    COMMUNICATION,
    COMPUTE,
    KIND_NAMES,
    LAUNCH_GRAPH,
    LAUNCH_KERNEL,
    LAUNCH_MEMORY,
    MEMORY,
    SGLANG_STEP_RE,
    TRACELENS_STEP_RE,
    VLLM_STEP_RE,
    ChromeTrace,
    Span,
)
from artifacts.stats import percentile

CONSECUTIVE_KERNEL_DELAY_US = 30.0  # HTA's default threshold for "kernel_wait" gaps
PREFILL_TOKEN_THRESHOLD = 2048
PREFILL_EXCESS_THRESHOLD_MS = 50.0
MAX_STEP_ROWS = 5000
TOP_KERNELS = 15
TOP_CPU_OPS = 10
SLOWEST_STEPS = 5

_STEP_NUM_RE = re.compile(r"#(\d+)$")
_KV_RE = re.compile(r"(\w+)=(\d+)")


# --------------------------------------------------------------------------------------
# Small numeric helpers.


# Columns as numpy views: the analyses below are C loops over the loader's compact arrays
# (numpy, chosen for this: HTA itself stands on it, and a per-kernel Python loop cost ~1 us
# a kernel, a third of the whole load + analysis of a 1M-event trace). Every sum that is
# compared with an exact reference is taken left to right or exactly (``math.fsum``), never
# by numpy's pairwise summation, so figures do not move with the implementation.
_DTYPES = {"d": np.float64, "i": np.int32, "b": np.int8, "q": np.int64}


def _np(values: Any) -> np.ndarray:
    """A zero-copy view of an ``array.array`` column (a copy of any other sequence)."""
    if isinstance(values, array):
        return (
            np.frombuffer(values, dtype=_DTYPES[values.typecode])
            if len(values)
            else (np.empty(0, dtype=_DTYPES[values.typecode]))
        )
    return np.asarray(values)


def merge_intervals(order: Any, ts: Any, dur: Any) -> tuple[np.ndarray, np.ndarray]:
    """Union of [ts, ts+dur) for indices in start order, as two float64 arrays.

    An interval joins the one before when it starts at or before the furthest end so far
    (touching intervals merge); its end is that running maximum. Durations are never
    negative (the loader clamps them), so a new interval's maximum is its own."""
    idx = np.asarray(order, dtype=np.int64) if not isinstance(order, np.ndarray) else order
    if not len(idx):
        return np.empty(0), np.empty(0)
    s = _np(ts)[idx]
    e = s + _np(dur)[idx]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return s[firsts], reach[lasts]


def _total(merged: tuple[Any, Any]) -> float:
    """Summed length of the union, exact for epoch timestamps.

    Lengths are taken per interval and then summed: ``end - start`` of two doubles of the
    same magnitude is exact (Sterbenz), whereas ``fsum(ends) - fsum(starts)`` rounds each
    ~4e19 sum to a multiple of 4,096 us on real epoch-microsecond traces."""
    starts, ends = merged
    return math.fsum((np.asarray(ends) - np.asarray(starts)).tolist())


def intersection_length(a: tuple[Any, Any], b: tuple[Any, Any]) -> float:
    """Length of the overlap of two unions of disjoint sorted intervals."""
    as_, ae, bs, be = (np.asarray(x).tolist() for x in (*a, *b))
    i = j = 0
    parts: list[float] = []
    while i < len(as_) and j < len(bs):
        lo = max(as_[i], bs[j])
        hi = min(ae[i], be[j])
        if hi > lo:
            parts.append(hi - lo)
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return math.fsum(parts)


def busy_within(merged: tuple[np.ndarray, np.ndarray], lo: float, hi: float) -> float:
    """How much of [lo, hi) the union ``merged`` covers."""
    starts, ends = merged
    k = max(0, int(np.searchsorted(starts, lo, side="right")) - 1)
    stop = int(np.searchsorted(starts, hi, side="left"))
    s = np.maximum(starts[k:stop], lo)
    e = np.minimum(ends[k:stop], hi)
    return math.fsum((e - s)[e > s].tolist())


def _sum_in_order(values: np.ndarray) -> float:
    """Left-to-right float sum (what a loop of ``+=`` gives), in C."""
    return float(sum(values.tolist(), 0.0))


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# --------------------------------------------------------------------------------------
# Launch lookup: correlation id -> launching runtime call, without a per-entry dict.


@dataclass
class _LaunchIndex:
    """Launch calls with a correlation id, sorted by it (stable: the first of equal ids in
    file order is the one found)."""

    corr: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    kind: np.ndarray

    @classmethod
    def build(cls, trace: ChromeTrace) -> _LaunchIndex:
        lc = trace.launches
        corr = _np(lc.corr)
        linked = np.flatnonzero(corr >= 0)
        order = linked[np.argsort(corr[linked], kind="stable")]
        ts = _np(lc.ts)[order]
        return cls(corr[order], ts, ts + _np(lc.dur)[order], _np(lc.kind)[order])

    def find(self, corr: int) -> int:
        if corr < 0:
            return -1
        k = int(np.searchsorted(self.corr, corr, side="left"))
        return k if k < len(self.corr) and self.corr[k] == corr else -1

    def find_all(self, corrs: Any) -> np.ndarray:
        """:meth:`find` of every correlation id, the searches in C (-1: no launch)."""
        corrs = _np(corrs)
        if not len(self.corr):
            return np.full(len(corrs), -1, dtype=np.int64)
        at = np.searchsorted(self.corr, corrs, side="left")
        hit = self.corr[np.minimum(at, len(self.corr) - 1)] == corrs
        hit &= corrs >= 0
        return np.where(hit, at, -1).astype(np.int64)


# --------------------------------------------------------------------------------------
# Step composition from engine annotations.


def parse_step_annotation(name: str) -> dict[str, Any] | None:
    """Composition an engine's step annotation states (None: not a step annotation)."""
    m = VLLM_STEP_RE.match(name)
    if m:
        new, cached = int(m.group(1)), int(m.group(2))
        return {
            "engine": "vllm",
            "new_requests": new,
            "cached_requests": cached,
            "tokens": None,
            "prefill_tokens": None,
            "decode_requests": None,
            "tokens_source": None,
        }
    m = TRACELENS_STEP_RE.match(name)
    if m:
        tokens, ctx, sq, gen = int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4))
        prefill = int(sq) if sq is not None and ctx > 0 else (tokens - gen if ctx else 0)
        return {
            "engine": "tracelens",
            "prefill_requests": ctx,
            "decode_requests": gen,
            "tokens": tokens,
            "prefill_tokens": max(0, prefill),
            "tokens_source": "annotation",
        }
    m = SGLANG_STEP_RE.match(name)
    if m:
        kv = {k: int(v) for k, v in _KV_RE.findall(m.group(2))}
        bs = kv.get("bs")
        if m.group(1) == "EXTEND":
            toks = kv.get("toks")
            return {
                "engine": "sglang",
                "prefill_requests": bs,
                "decode_requests": 0,
                "tokens": toks,
                "prefill_tokens": toks,
                "tokens_source": "annotation" if toks is not None else None,
            }
        return {
            "engine": "sglang",
            "prefill_requests": 0,
            "decode_requests": bs,
            "tokens": bs,
            "prefill_tokens": 0,
            "tokens_source": "annotation",
        }
    return None


def _step_kind(c: dict[str, Any] | None) -> str:
    if c is None:
        return "unknown"
    pt = c.get("prefill_tokens")
    dec = c.get("decode_requests")
    if pt is None:
        if c.get("new_requests") == 0 and c.get("engine") == "vllm":
            return "decode"  # no new request; may still hold a continuing prefill chunk
        return "unknown"
    if pt <= 0:
        return "decode"
    return "mixed" if dec else "prefill"


def _estimate_tokens(steps: list[dict[str, Any]]) -> None:
    """Fill vLLM token counts from the per-step all-reduce size (tokens x hidden size).

    The hidden size is the smallest all-reduce elements-per-request ratio over steps that
    started no new request (pure decode steps give exactly hidden; CUDA-graph padding and
    continuing prefill chunks only make the ratio larger).
    """
    ratios = [
        s["_allreduce_nelems"] / s["composition"]["cached_requests"]
        for s in steps
        if s["composition"]
        and s["composition"].get("engine") == "vllm"
        and s["composition"]["new_requests"] == 0
        and s["composition"]["cached_requests"] > 0
        and s["_allreduce_nelems"] > 0
    ]
    if not ratios:
        return
    hidden = min(ratios)
    if hidden < 1:
        return
    for s in steps:
        c = s["composition"]
        if not c or c.get("engine") != "vllm" or s["_allreduce_nelems"] <= 0:
            continue
        tokens = round(s["_allreduce_nelems"] / hidden)
        cached = c["cached_requests"]
        prefill = tokens - cached
        if prefill < max(8, cached // 4) and c["new_requests"] == 0:
            prefill = 0
        c["tokens"] = tokens
        c["prefill_tokens"] = max(0, prefill)
        c["decode_requests"] = cached if prefill > 0 else tokens
        c["tokens_source"] = "allreduce-estimate"
        c["hidden_size_estimate"] = round(hidden)


# --------------------------------------------------------------------------------------
# The analysis.


@dataclass
class TraceAnalysis:
    """Everything derived from one trace; ``as_dict()`` is what Atlas stores and shows."""

    events: dict[str, Any]
    metadata: dict[str, Any]
    steps: list[dict[str, Any]]
    kernel_breakdown: dict[str, Any]
    idle: dict[str, Any]
    collectives: dict[str, Any]
    graph_launches: dict[str, Any]
    long_cpu_ops: list[dict[str, Any]]
    slowest_steps: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    signals: dict[str, float]
    steps_truncated: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "chrome-trace",
            "events": self.events,
            "metadata": self.metadata,
            "steps": self.steps,
            "steps_truncated": self.steps_truncated,
            "kernel_breakdown": self.kernel_breakdown,
            "idle": self.idle,
            "collectives": self.collectives,
            "graph_launches": self.graph_launches,
            "long_cpu_ops": self.long_cpu_ops,
            "slowest_steps": self.slowest_steps,
            "findings": self.findings,
            "signals": self.signals,
            "notes": self.notes,
        }


def _events_summary(trace: ChromeTrace) -> dict[str, Any]:
    return {
        "total": trace.events_total,
        "by_category": dict(sorted(trace.category_counts.items(), key=lambda kv: -kv[1])),
        "by_phase": trace.phase_counts,
        "dropped_python_function": trace.dropped_python_function,
        "malformed": trace.malformed_events,
        "gpu_activities": len(trace.gpu),
        "launches": len(trace.launches),
        "profiler_steps": len(trace.steps),
        "step_annotations": len(trace.step_annotations),
        "memory_instants": trace.memory_instants,
        "decompressed_bytes": trace.input_bytes,
    }


def _metadata_summary(trace: ChromeTrace) -> dict[str, Any]:
    m = trace.metadata
    devices = m.get("deviceProperties")
    names = []
    if isinstance(devices, list):
        names = sorted({str(d.get("name", ""))[:80] for d in devices if isinstance(d, dict)})
    dist = m.get("distributedInfo") if isinstance(m.get("distributedInfo"), dict) else {}
    out: dict[str, Any] = {
        "schema_version": m.get("schemaVersion"),
        "display_time_unit": m.get("displayTimeUnit"),
        "base_time_ns": m.get("baseTimeNanoseconds"),
        "trace_name": m.get("traceName"),
        "device_names": names,
        "device_count": len(devices) if isinstance(devices, list) else 0,
        "rank": dist.get("rank"),
        "world_size": dist.get("world_size"),
        "backend": dist.get("backend"),
        "nccl_version": dist.get("nccl_version"),
        "top_level_keys": m.get("top_level_keys", []),
    }
    for key in ("cuda_runtime_version", "cuda_driver_version", "hip_runtime_version"):
        if key in m:
            out[key] = m[key]
    return {k: v for k, v in out.items() if isinstance(v, (str, int, float, list, type(None)))}


def _origin(trace: ChromeTrace) -> float:
    cands = []
    if trace.window:
        cands.append(trace.window[0])
    if trace.steps:
        cands.append(min(s.ts for s in trace.steps))
    if len(trace.gpu):
        cands.append(float(_np(trace.gpu.ts).min()))
    if len(trace.launches):
        cands.append(float(_np(trace.launches.ts).min()))
    return min(cands) if cands else 0.0


def _of_kind(order: np.ndarray, kinds: Any, k: int) -> np.ndarray:
    """The indices of ``order`` whose activity is of kind ``k``, in order."""
    return order[_np(kinds)[order] == k]


def _merged_kinds(trace: ChromeTrace, order: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The union of each kind's activities, by kind: computed once, read four times."""
    g = trace.gpu
    return [
        merge_intervals(_of_kind(order, g.kind, k), g.ts, g.dur) for k in range(len(KIND_NAMES))
    ]


def _kernel_breakdown(
    trace: ChromeTrace,
    order: np.ndarray,
    merged_kinds: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> dict[str, Any]:
    g = trace.gpu
    n_names = len(trace.names)
    names, dur, kind = _np(g.name), _np(g.dur), _np(g.kind)
    # bincount adds its weights in input order: the same sums as a loop of +=.
    count = np.bincount(names, minlength=n_names)
    total = np.bincount(names, weights=dur, minlength=n_names)
    peak = np.zeros(n_names)
    np.maximum.at(peak, names, dur)
    kind_count = np.bincount(kind, minlength=len(KIND_NAMES)).tolist()
    kind_sum = np.bincount(kind, weights=dur, minlength=len(KIND_NAMES)).tolist()
    grand = sum(kind_sum) or 1.0
    by_kind = {}
    merged_kinds = merged_kinds or _merged_kinds(trace, order)
    for k, kname in enumerate(KIND_NAMES):
        merged = merged_kinds[k]
        by_kind[kname] = {
            "count": kind_count[k],
            "sum_ms": _r(kind_sum[k] / 1e3),
            "union_ms": _r(_total(merged) / 1e3),
            "percent": _r(100.0 * kind_sum[k] / grand, 2),
        }
    used = np.flatnonzero(count)
    top = used[np.argsort(-total[used], kind="stable")][:TOP_KERNELS].tolist()
    last = np.full(n_names, -1, dtype=np.int64)
    if top:
        np.maximum.at(last, names, np.arange(len(names), dtype=np.int64))
    return {
        "by_kind": by_kind,
        "total_ms": _r(grand / 1e3 if kind_sum and sum(kind_sum) else 0.0),
        "top_kernels": [
            {
                "name": trace.names[i][:240],
                "kind": KIND_NAMES[int(kind[last[i]])],
                "count": int(count[i]),
                "total_ms": _r(float(total[i]) / 1e3),
                "mean_us": _r(float(total[i]) / int(count[i])),
                "max_us": _r(float(peak[i])),
                "percent": _r(100.0 * float(total[i]) / grand, 2),
            }
            for i in top
        ],
    }


# More (device, stream) pairs than this: per-stream numpy calls would cost more than one
# pass of Python over the kernels (a hostile trace with a stream per kernel).
_MANY_STREAMS = 4096


def _stream_idle(g: Any, order: np.ndarray, launch_ts: np.ndarray) -> list[dict[str, Any]]:
    """Each (device, stream)'s activities, busy time and idle gaps by cause, in order of
    first appearance. A gap is measured from the furthest end so far on that stream;
    ``launch_ts`` is NaN where no launch is linked (NaN > x is false: not a host wait)."""
    start = _np(g.ts)[order]
    dur = _np(g.dur)[order]
    end = start + dur
    device = _np(g.device)[order].astype(np.int64)
    stream = _np(g.stream)[order].astype(np.int64)
    launched = launch_ts[order]
    key = (device << 32) | (stream & 0xFFFFFFFF)
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if len(uniq) > _MANY_STREAMS:
        return _stream_idle_loop(start, dur, end, device, stream, launched)
    members = np.argsort(inverse, kind="stable")  # each stream's activities, in start order
    bounds = np.concatenate(([0], np.cumsum(np.bincount(inverse, minlength=len(uniq)))))
    rows = []
    for u in np.argsort(first, kind="stable").tolist():
        at = members[bounds[u] : bounds[u + 1]]
        s, e = start[at], end[at]
        reach = np.maximum.accumulate(e)
        before = reach[:-1]
        gap = s[1:] - before
        waiting = gap > 0
        host = waiting & (launched[at][1:] > before)
        rest = waiting & ~host
        short = rest & (gap < CONSECUTIVE_KERNEL_DELAY_US)
        rows.append(
            {
                "device": int(device[at[0]]),
                "stream": int(stream[at[0]]),
                "count": len(at),
                "first": float(s[0]),
                "last": float(reach[-1]),
                "busy": _sum_in_order(dur[at]),
                "host_wait": _sum_in_order(gap[host]),
                "kernel_wait": _sum_in_order(gap[short]),
                "other": _sum_in_order(gap[rest & ~short]),
            }
        )
    return rows


def _stream_idle_loop(
    start: np.ndarray,
    dur: np.ndarray,
    end: np.ndarray,
    device: np.ndarray,
    stream: np.ndarray,
    launched: np.ndarray,
) -> list[dict[str, Any]]:
    """:func:`_stream_idle` one activity at a time (for traces with very many streams)."""
    streams: dict[tuple[int, int], dict[str, Any]] = {}
    prev_end: dict[tuple[int, int], float] = {}
    for key, s, d, e, lt in zip(
        zip(device.tolist(), stream.tolist(), strict=True),
        start.tolist(),
        dur.tolist(),
        end.tolist(),
        launched.tolist(),
        strict=True,
    ):
        st = streams.get(key)
        if st is None:
            streams[key] = {
                "device": key[0],
                "stream": key[1],
                "count": 1,
                "first": s,
                "last": e,
                "busy": d,
                "host_wait": 0.0,
                "kernel_wait": 0.0,
                "other": 0.0,
            }
            prev_end[key] = e
            continue
        st["count"] += 1
        st["busy"] += d
        pe = prev_end[key]
        gap = s - pe
        if gap > 0:
            if lt > pe:
                st["host_wait"] += gap
            elif gap < CONSECUTIVE_KERNEL_DELAY_US:
                st["kernel_wait"] += gap
            else:
                st["other"] += gap
        if e > pe:
            prev_end[key] = e
        if e > st["last"]:
            st["last"] = e
    return list(streams.values())


def _largest_gaps(
    merged_all: tuple[np.ndarray, np.ndarray], k: int = 5
) -> list[tuple[float, float]]:
    """The k largest gaps with nothing running on any stream, as (gap, where it starts)."""
    starts, ends = merged_all
    gaps = starts[1:] - ends[:-1]
    picked = np.arange(len(gaps))
    if len(gaps) > k:
        cut = np.partition(gaps, len(gaps) - k)[len(gaps) - k]
        picked = np.flatnonzero(gaps >= cut)
    pairs = zip(gaps[picked].tolist(), ends[:-1][picked].tolist(), strict=True)
    return sorted(pairs, reverse=True)[:k]


def _idle(
    trace: ChromeTrace,
    order: np.ndarray,
    launch_ts: np.ndarray,
    origin: float,
    merged_compute: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray]]:
    g = trace.gpu
    merged_all = merge_intervals(order, g.ts, g.dur)
    if not len(merged_all[0]):
        return {"kernel_time_ms": 0.0, "streams": []}, merged_all
    kernel_time = float(merged_all[1][-1] - merged_all[0][0])
    busy = _total(merged_all)
    idle = max(0.0, kernel_time - busy)
    if merged_compute is None:
        merged_compute = merge_intervals(_of_kind(order, g.kind, COMPUTE), g.ts, g.dur)
    compute = _total(merged_compute)
    non_compute = max(0.0, kernel_time - compute - idle)
    gaps = _largest_gaps(merged_all)
    stream_rows = []
    for st in sorted(_stream_idle(g, order, launch_ts), key=lambda s: -s["busy"]):
        span = st["last"] - st["first"]
        idle_s = st["host_wait"] + st["kernel_wait"] + st["other"]
        stream_rows.append(
            {
                "device": st["device"],
                "stream": st["stream"],
                "activities": st["count"],
                "busy_ms": _r(st["busy"] / 1e3),
                "span_ms": _r(span / 1e3),
                "idle_ms": _r(idle_s / 1e3),
                "idle_host_wait_ms": _r(st["host_wait"] / 1e3),
                "idle_kernel_wait_ms": _r(st["kernel_wait"] / 1e3),
                "idle_other_ms": _r(st["other"] / 1e3),
            }
        )
    return {
        "definition": "HTA temporal breakdown over all GPU activities of the trace",
        "kernel_time_ms": _r(kernel_time / 1e3),
        "idle_ms": _r(idle / 1e3),
        "compute_ms": _r(compute / 1e3),
        "non_compute_ms": _r(non_compute / 1e3),
        "idle_fraction": _r(idle / kernel_time, 4) if kernel_time > 0 else None,
        "compute_fraction": _r(compute / kernel_time, 4) if kernel_time > 0 else None,
        "non_compute_fraction": _r(non_compute / kernel_time, 4) if kernel_time > 0 else None,
        "consecutive_kernel_delay_us": CONSECUTIVE_KERNEL_DELAY_US,
        "largest_gaps": [
            {"at_ms": _r((at - origin) / 1e3), "gap_ms": _r(gap / 1e3)} for gap, at in gaps
        ],
        "streams": stream_rows[:64],
    }, merged_all


def _collectives(
    trace: ChromeTrace,
    order: np.ndarray,
    merged_compute: tuple[np.ndarray, np.ndarray],
    comm: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    g = trace.gpu
    if comm is None:
        comm = merge_intervals(_of_kind(order, g.kind, COMMUNICATION), g.ts, g.dur)
    comm_time = _total(comm)
    overlap = intersection_length(comm, merged_compute) if comm_time > 0 else 0.0
    rows = []
    for name, c in sorted(trace.collectives.items(), key=lambda kv: -kv[1]["total_us"]):
        rows.append(
            {
                "collective": name,
                "count": c["count"],
                "total_ms": _r(c["total_us"] / 1e3),
                "mean_us": _r(c["total_us"] / c["count"]) if c["count"] else None,
                "max_us": _r(c["max_us"]),
                "in_nelems_total": c["in_nelems_total"],
                "dtype": c["dtype"],
                "group_size": c["group_size"],
                "process_group": c["process_group"],
            }
        )
    return {
        "kernels": sum(c["count"] for c in trace.collectives.values()),
        "comm_time_ms": _r(comm_time / 1e3),
        "overlap_ms": _r(overlap / 1e3),
        "comm_overlap_fraction": _r(overlap / comm_time, 4) if comm_time > 0 else None,
        "by_collective": rows,
    }


def _graph_launches(
    trace: ChromeTrace, launch_of: np.ndarray, index: _LaunchIndex
) -> dict[str, Any]:
    lc_kind = _np(trace.launches.kind)
    g = trace.gpu
    linked = launch_of >= 0
    by = launch_of[linked]
    launch_kind = index.kind[by]
    kind = _np(g.kind)[linked]
    dur = _np(g.dur)[linked]
    not_memory = kind != MEMORY
    graph = not_memory & (launch_kind == LAUNCH_GRAPH)
    eager = not_memory & (launch_kind == LAUNCH_KERNEL)
    graph_kernels = int(np.count_nonzero(graph))
    eager_kernels = int(np.count_nonzero(eager))
    per_graph = np.bincount(by[graph]) if graph_kernels else np.zeros(1, dtype=np.int64)
    delays = (_np(g.ts)[linked][eager] - index.end[by[eager]])[:1_000_000]
    linked_kernels = graph_kernels + eager_kernels
    return {
        "graph_launches": int(np.count_nonzero(lc_kind == LAUNCH_GRAPH)),
        "eager_kernel_launches": int(np.count_nonzero(lc_kind == LAUNCH_KERNEL)),
        "memory_launches": int(np.count_nonzero(lc_kind == LAUNCH_MEMORY)),
        "kernels_from_graphs": graph_kernels,
        "kernels_from_eager_launches": eager_kernels,
        "memory_ops_with_linked_launch": int(np.count_nonzero(~not_memory)),
        "activities_without_linked_launch": int(len(launch_of) - len(by)),
        "graph_kernel_time_ms": _r(_sum_in_order(dur[graph]) / 1e3),
        "eager_kernel_time_ms": _r(_sum_in_order(dur[eager]) / 1e3),
        "max_kernels_per_graph_launch": int(per_graph.max()),
        "graph_launch_fraction": _r(graph_kernels / linked_kernels, 4) if linked_kernels else None,
        "eager_launch_delay_p50_us": _r(_percentile_sorted(np.sort(delays), 50)),
        "eager_launch_delay_p99_us": _r(_percentile_sorted(np.sort(delays), 99)),
    }


def _percentile_sorted(s: np.ndarray, q: float) -> float | None:
    """``artifacts.stats.percentile`` of values already sorted (the same arithmetic)."""
    if not len(s):
        return None
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo]) + (float(s[hi]) - float(s[lo])) * (pos - lo)


def _long_cpu_ops(
    trace: ChromeTrace, merged_all: tuple[np.ndarray, np.ndarray], origin: float
) -> list[dict[str, Any]]:
    """Longest CPU ops that launched nothing: time the host spent while the GPU waited."""
    lc = trace.launches
    tids, launch_ts = _np(lc.tid), _np(lc.ts)
    by_thread = np.lexsort((launch_ts, tids))  # by thread, then start
    tids, launch_ts = tids[by_thread], launch_ts[by_thread]
    picked: list[Span] = []
    out = []
    for op in trace.cpu_ops:
        if len(out) >= TOP_CPU_OPS or op.dur <= 0:
            break
        lo = int(np.searchsorted(tids, op.tid, side="left"))
        hi = int(np.searchsorted(tids, op.tid, side="right"))
        if lo < hi:
            k = lo + int(np.searchsorted(launch_ts[lo:hi], op.ts, side="left"))
            if k < hi and launch_ts[k] <= op.ts + op.dur:
                continue
        if any(
            p.tid == op.tid and p.ts <= op.ts and op.ts + op.dur <= p.ts + p.dur for p in picked
        ):
            continue  # a child of an op already listed
        picked.append(op)
        busy = busy_within(merged_all, op.ts, op.ts + op.dur)
        out.append(
            {
                "name": op.name[:240],
                "category": op.cat,
                "tid": op.tid,
                "start_ms": _r((op.ts - origin) / 1e3),
                "dur_ms": _r(op.dur / 1e3),
                "gpu_busy_fraction": _r(busy / op.dur, 4),
            }
        )
    return out


def _outermost(spans: list[Span]) -> list[Span]:
    """Drop spans nested in an earlier one (TraceLens wraps SGLang's step[...] annotation)."""
    out: list[Span] = []
    for sp in spans:
        if out and sp.ts + sp.dur <= out[-1].ts + out[-1].dur:
            continue
        out.append(sp)
    return out


def _build_steps(
    trace: ChromeTrace, order: np.ndarray, launch_ts: np.ndarray, origin: float
) -> list[dict[str, Any]]:
    g = trace.gpu
    spans = sorted(trace.steps, key=lambda s: s.ts)
    if not spans:
        spans = _outermost(sorted(trace.step_annotations, key=lambda s: (s.ts, -s.dur)))
    if not spans:
        return []
    starts = [s.ts for s in spans]
    n = len(spans)
    busy = [0.0] * n
    kernels = [0] * n
    cur_s: list[float | None] = [None] * n
    cur_e = [0.0] * n
    allreduce = [0] * n
    step_of = array("q", [-1]) * len(g)
    # A kernel belongs to the step in which its launch started (its own start unlinked).
    gts = _np(g.ts)
    when = np.where(np.isnan(launch_ts), gts, launch_ts)[order]
    at = np.searchsorted(np.asarray(starts), when, side="right") - 1
    ends = np.asarray([sp.ts + sp.dur for sp in spans])
    inside = at >= 0
    inside[inside] = when[inside] <= ends[at[inside]]
    for i, k, s, d in zip(
        order[inside].tolist(),
        at[inside].tolist(),
        gts[order[inside]].tolist(),
        _np(g.dur)[order[inside]].tolist(),
        strict=True,
    ):
        step_of[i] = k
        kernels[k] += 1
        e = s + d
        if cur_s[k] is None or s > cur_e[k]:
            if cur_s[k] is not None:
                busy[k] += cur_e[k] - cur_s[k]
            cur_s[k], cur_e[k] = s, e
        elif e > cur_e[k]:
            cur_e[k] = e
    for k in range(n):
        if cur_s[k] is not None:
            busy[k] += cur_e[k] - cur_s[k]
    for j in range(len(g.msg_index)):
        i = g.msg_index[j]
        k = step_of[i]
        if k >= 0 and "allreduce" in trace.names[g.name[i]].lower().replace("_", ""):
            allreduce[k] = max(allreduce[k], g.msg_nelems[j])
    annotations = sorted(trace.step_annotations, key=lambda s: s.ts)
    ann_starts = [a.ts for a in annotations]
    rows = []
    for k, sp in enumerate(spans):
        comp = None
        ann_name = None
        if not trace.steps:
            ann_name = sp.name  # the annotations are the steps
        else:
            a = bisect.bisect_left(ann_starts, sp.ts)
            if a < len(annotations) and annotations[a].ts <= sp.ts + sp.dur:
                ann_name = annotations[a].name
        if ann_name is not None:
            comp = parse_step_annotation(ann_name)
        m = _STEP_NUM_RE.search(sp.name)
        rows.append(
            {
                "name": sp.name[:120],
                "number": int(m.group(1)) if m and sp.name.startswith("ProfilerStep") else None,
                "start_ms": _r((sp.ts - origin) / 1e3),
                "dur_ms": _r(sp.dur / 1e3),
                "gpu_busy_ms": _r(busy[k] / 1e3),
                "gpu_busy_fraction": _r(busy[k] / sp.dur, 4) if sp.dur > 0 else None,
                "gpu_activities": kernels[k],
                "annotation": ann_name[:160] if ann_name else None,
                "composition": comp,
                "_allreduce_nelems": allreduce[k],
            }
        )
    _estimate_tokens(rows)
    for row in rows:
        row["kind"] = _step_kind(row["composition"])
        del row["_allreduce_nelems"]
    return rows


def _explain(row: dict[str, Any], decode_p50: float | None) -> str:
    c = row["composition"] or {}
    parts = []
    pt = c.get("prefill_tokens")
    if pt:
        est = " (estimated)" if c.get("tokens_source") == "allreduce-estimate" else ""
        parts.append(f"prefill of {pt:,} new tokens{est}")
    if c.get("new_requests") is not None:
        parts.append(f"{c['new_requests']} new / {c['cached_requests']} cached requests")
    elif c.get("decode_requests"):
        parts.append(f"{c['decode_requests']} decode requests")
    if row["kind"] == "decode" and not pt:
        parts.append("decode only")
    frac = row.get("gpu_busy_fraction")
    if frac is not None and frac < 0.6:
        parts.append(f"GPU busy only {frac:.0%} of the step (host-side stall)")
    text = "; ".join(parts) if parts else "no composition annotation"
    if decode_p50 is not None:
        text += f"; {row['dur_ms'] - decode_p50:+.1f} ms vs the median decode-only step"
    return text


def _prefill_finding(
    rows: list[dict[str, Any]],
    decode_p50: float | None,
    token_threshold: int,
    excess_threshold_ms: float,
) -> tuple[dict[str, Any] | None, dict[str, float]]:
    extra: dict[str, float] = {}
    if decode_p50 is None:
        return None, extra
    heavy = [
        r
        for r in rows
        if (r["composition"] or {}).get("prefill_tokens") is not None
        and r["composition"]["prefill_tokens"] >= token_threshold
    ]
    slopes = [
        (r["dur_ms"] - decode_p50) / r["composition"]["prefill_tokens"] * 1000.0
        for r in heavy
        if r["dur_ms"] > decode_p50
    ]
    if slopes:
        extra["artifact_prefill_ms_per_1k_tokens"] = round(percentile(slopes, 50) or 0.0, 3)
    oversized = [
        r
        for r in heavy
        if r["dur_ms"] - decode_p50 >= excess_threshold_ms and r["dur_ms"] >= 1.5 * decode_p50
    ]
    if not oversized:
        return None, extra
    k = max(3, len(rows) // 100)
    slowest = sorted(rows, key=lambda r: -r["dur_ms"])[:k]
    ids = {id(r) for r in oversized}
    explained = sum(1 for r in slowest if id(r) in ids)
    if explained * 2 < len(slowest):
        return None, extra
    worst = max(oversized, key=lambda r: r["dur_ms"])
    per_1k = extra.get("artifact_prefill_ms_per_1k_tokens")
    max_tokens = max(r["composition"]["prefill_tokens"] for r in oversized)
    excess = worst["dur_ms"] - decode_p50
    values: dict[str, Any] = {
        "decode_step_p50_ms": round(decode_p50, 3),
        "prefill_step_excess_ms": round(excess, 3),
        "worst_step": worst["name"],
        "worst_step_ms": worst["dur_ms"],
        "worst_step_prefill_tokens": worst["composition"]["prefill_tokens"],
        "max_new_tokens_per_step": max_tokens,
        "oversized_steps": len(oversized),
        "steps": len(rows),
        "slowest_steps_explained": f"{explained}/{len(slowest)}",
        "token_threshold": token_threshold,
        "tokens_source": worst["composition"].get("tokens_source"),
    }
    detail = (
        f"{len(oversized)} of {len(rows)} steps prefill >= {token_threshold:,} new tokens and run "
        f">= {excess_threshold_ms:.0f} ms longer than the median decode-only step "
        f"({decode_p50:.1f} ms); the worst ({worst['name']}, "
        f"{worst['composition']['prefill_tokens']:,} new tokens) takes {worst['dur_ms']:.1f} ms, "
        f"+{excess:.1f} ms. Every request decoding in such a step sees that as inter-token "
        "latency."
    )
    if per_1k:
        values["ms_per_1k_new_tokens"] = per_1k
        values["excess_at_4096_tokens_ms"] = round(per_1k * 4.096, 1)
        budget = max(256, int(20.0 / (per_1k / 1000.0)) // 256 * 256)
        values["suggested_max_num_batched_tokens"] = budget
        detail += (
            f" At ~{per_1k:.1f} ms per 1,000 new tokens a 4,096-token chunk adds "
            f"~{per_1k * 4.096:.0f} ms; a per-step token budget near {budget:,} keeps the "
            "excess near 20 ms."
        )
    return {
        "key": "oversized-prefill-chunks",
        "title": "Large prefill chunks stretch engine steps",
        "detail": detail,
        "values": values,
    }, extra


def analyse_trace(
    trace: ChromeTrace,
    *,
    prefill_token_threshold: int = PREFILL_TOKEN_THRESHOLD,
    prefill_excess_threshold_ms: float = PREFILL_EXCESS_THRESHOLD_MS,
) -> TraceAnalysis:
    """Steps, GPU time by kind, idle, collectives, graph launches, findings and signals."""
    g = trace.gpu
    origin = _origin(trace)
    order = np.argsort(_np(g.ts), kind="stable")  # start order, ties in file order
    index = _LaunchIndex.build(trace)
    launch_of = index.find_all(g.corr)
    launch_ts = np.full(len(g), np.nan)
    linked = launch_of >= 0
    launch_ts[linked] = index.ts[launch_of[linked]]

    merged_kinds = _merged_kinds(trace, order)
    merged_compute = merged_kinds[COMPUTE]
    breakdown = _kernel_breakdown(trace, order, merged_kinds)
    idle, merged_all = _idle(trace, order, launch_ts, origin, merged_compute)
    collectives = _collectives(trace, order, merged_compute, merged_kinds[COMMUNICATION])
    graphs = _graph_launches(trace, launch_of, index)
    cpu_ops = _long_cpu_ops(trace, merged_all, origin)
    rows = _build_steps(trace, order, launch_ts, origin)
    del launch_ts, order

    durs = [r["dur_ms"] for r in rows]
    decode = [r["dur_ms"] for r in rows if r["kind"] == "decode"]
    decode_p50 = percentile(decode, 50) if len(decode) >= 3 else None
    for r in rows:
        r["excess_vs_decode_ms"] = _r(r["dur_ms"] - decode_p50) if decode_p50 is not None else None
    slowest = [
        {**r, "explanation": _explain(r, decode_p50)}
        for r in sorted(rows, key=lambda r: -r["dur_ms"])[:SLOWEST_STEPS]
    ]
    finding, extra = _prefill_finding(
        rows, decode_p50, prefill_token_threshold, prefill_excess_threshold_ms
    )
    findings = [finding] if finding else []

    signals: dict[str, float] = {}
    if rows:
        signals["artifact_step_count"] = len(rows)
        signals["artifact_step_p50_ms"] = round(percentile(durs, 50) or 0.0, 3)
        signals["artifact_step_p99_ms"] = round(percentile(durs, 99) or 0.0, 3)
        signals["artifact_step_max_ms"] = round(max(durs), 3)
    if decode_p50 is not None:
        signals["artifact_decode_step_p50_ms"] = round(decode_p50, 3)
    tokens = [
        r["composition"]["prefill_tokens"]
        for r in rows
        if r["composition"] and r["composition"].get("prefill_tokens") is not None
    ]
    if tokens:
        signals["artifact_max_new_tokens_per_step"] = max(tokens)
    # What a chunk adds to a step is GPU work: compared on GPU-busy time, a host stall in
    # the step (a GC pause, a slow scheduler) is not read as an oversized prefill.
    prefill_busy = [r["gpu_busy_ms"] for r in rows if r["kind"] in ("prefill", "mixed")]
    decode_busy = [r["gpu_busy_ms"] for r in rows if r["kind"] == "decode"]
    if prefill_busy and len(decode_busy) >= 3:
        busy_p50 = percentile(decode_busy, 50) or 0.0
        signals["artifact_prefill_step_excess_ms"] = round(max(prefill_busy) - busy_p50, 3)
    signals.update(extra)
    for key, value in (
        ("artifact_gpu_idle_fraction", idle.get("idle_fraction")),
        ("artifact_gpu_compute_fraction", idle.get("compute_fraction")),
        ("artifact_comm_overlap_fraction", collectives["comm_overlap_fraction"]),
        ("artifact_graph_launch_fraction", graphs["graph_launch_fraction"]),
    ):
        if value is not None:
            signals[key] = value

    notes = []
    if not rows:
        notes.append("no ProfilerStep spans or engine step annotations: no per-step table")
    if trace.dropped_python_function:
        notes.append(f"{trace.dropped_python_function:,} python_function events dropped at load")
    return TraceAnalysis(
        events=_events_summary(trace),
        metadata=_metadata_summary(trace),
        steps=rows[:MAX_STEP_ROWS],
        steps_truncated=max(0, len(rows) - MAX_STEP_ROWS),
        kernel_breakdown=breakdown,
        idle=idle,
        collectives=collectives,
        graph_launches=graphs,
        long_cpu_ops=cpu_ops,
        slowest_steps=slowest,
        findings=findings,
        signals=signals,
        notes=notes,
    )
