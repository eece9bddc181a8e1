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
import operator
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Any

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


def merge_intervals(order: Iterable[int], ts: array, dur: array) -> tuple[array, array]:
    """Union of [ts, ts+dur) for indices in start order, as two compact arrays."""
    starts, ends = array("d"), array("d")
    cur_s = cur_e = None
    for i in order:
        s = ts[i]
        e = s + dur[i]
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                starts.append(cur_s)
                ends.append(cur_e)
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        starts.append(cur_s)
        ends.append(cur_e)
    return starts, ends


def _total(merged: tuple[array, array]) -> float:
    """Summed length of the union, exact for epoch timestamps.

    Lengths are taken per interval and then summed: ``end - start`` of two doubles of the
    same magnitude is exact (Sterbenz), whereas ``fsum(ends) - fsum(starts)`` rounds each
    ~4e19 sum to a multiple of 4,096 us on real epoch-microsecond traces."""
    return math.fsum(e - s for s, e in zip(merged[0], merged[1], strict=True))


def intersection_length(a: tuple[array, array], b: tuple[array, array]) -> float:
    """Length of the overlap of two unions of disjoint sorted intervals."""
    (as_, ae), (bs, be) = a, b
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


def busy_within(merged: tuple[array, array], lo: float, hi: float) -> float:
    """How much of [lo, hi) the union ``merged`` covers."""
    starts, ends = merged
    k = max(0, bisect.bisect_right(starts, lo) - 1)
    parts: list[float] = []
    while k < len(starts) and starts[k] < hi:
        s, e = max(starts[k], lo), min(ends[k], hi)
        if e > s:
            parts.append(e - s)
        k += 1
    return math.fsum(parts)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# --------------------------------------------------------------------------------------
# Launch lookup: correlation id -> launching runtime call, without a per-entry dict.


@dataclass
class _LaunchIndex:
    corr: array
    ts: array
    end: array
    kind: array

    @classmethod
    def build(cls, trace: ChromeTrace) -> _LaunchIndex:
        lc = trace.launches
        linked = compress(range(len(lc)), map(operator.ge, lc.corr, repeat(0)))
        order = sorted(linked, key=lc.corr.__getitem__)
        ts = array("d", map(lc.ts.__getitem__, order))
        return cls(
            array("q", map(lc.corr.__getitem__, order)),
            ts,
            array("d", map(operator.add, ts, map(lc.dur.__getitem__, order))),
            array("b", map(lc.kind.__getitem__, order)),
        )

    def find(self, corr: int) -> int:
        if corr < 0:
            return -1
        k = bisect.bisect_left(self.corr, corr)
        return k if k < len(self.corr) and self.corr[k] == corr else -1

    def find_all(self, corrs: array) -> array:
        """:meth:`find` of every correlation id, the searches in C."""
        at = list(map(bisect.bisect_left, repeat(self.corr), corrs))
        ids: list[int | None] = [*self.corr, None]  # at == len: no match
        found = map(operator.eq, map(ids.__getitem__, at), corrs)
        return array("q", [k if hit else -1 for k, hit in zip(at, found, strict=True)])


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
        cands.append(min(trace.gpu.ts))
    if len(trace.launches):
        cands.append(min(trace.launches.ts))
    return min(cands) if cands else 0.0


def _of_kind(order: list[int], kinds: array, k: int) -> list[int]:
    """The indices of ``order`` whose activity is of kind ``k``, in order."""
    return [i for i in order if kinds[i] == k]


def _merged_kinds(trace: ChromeTrace, order: list[int]) -> list[tuple[array, array]]:
    """The union of each kind's activities, by kind: computed once, read four times."""
    g = trace.gpu
    return [
        merge_intervals(_of_kind(order, g.kind, k), g.ts, g.dur) for k in range(len(KIND_NAMES))
    ]


def _kernel_breakdown(
    trace: ChromeTrace, order: list[int], merged_kinds: list[tuple[array, array]] | None = None
) -> dict[str, Any]:
    g = trace.gpu
    n_names = len(trace.names)
    count = array("q", bytes(8 * n_names))
    total = array("d", bytes(8 * n_names))
    peak = array("d", bytes(8 * n_names))
    kind_sum = [0.0] * len(KIND_NAMES)
    kind_count = [0] * len(KIND_NAMES)
    for i in range(len(g)):
        nid, d, k = g.name[i], g.dur[i], g.kind[i]
        count[nid] += 1
        total[nid] += d
        if d > peak[nid]:
            peak[nid] = d
        kind_sum[k] += d
        kind_count[k] += 1
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
    top = sorted((i for i in range(n_names) if count[i]), key=lambda i: -total[i])[:TOP_KERNELS]
    kinds_of = {g.name[i]: g.kind[i] for i in range(len(g))} if top else {}
    return {
        "by_kind": by_kind,
        "total_ms": _r(grand / 1e3 if kind_sum and sum(kind_sum) else 0.0),
        "top_kernels": [
            {
                "name": trace.names[i][:240],
                "kind": KIND_NAMES[kinds_of.get(i, COMPUTE)],
                "count": count[i],
                "total_ms": _r(total[i] / 1e3),
                "mean_us": _r(total[i] / count[i]),
                "max_us": _r(peak[i]),
                "percent": _r(100.0 * total[i] / grand, 2),
            }
            for i in top
        ],
    }


def _idle(
    trace: ChromeTrace,
    order: list[int],
    launch_ts: list[float | None],
    origin: float,
    merged_compute: tuple[array, array] | None = None,
) -> tuple[dict[str, Any], tuple[array, array]]:
    g = trace.gpu
    merged_all = merge_intervals(order, g.ts, g.dur)
    if not len(merged_all[0]):
        return {"kernel_time_ms": 0.0, "streams": []}, merged_all
    kernel_time = merged_all[1][-1] - merged_all[0][0]
    busy = _total(merged_all)
    idle = max(0.0, kernel_time - busy)
    if merged_compute is None:
        merged_compute = merge_intervals(_of_kind(order, g.kind, COMPUTE), g.ts, g.dur)
    compute = _total(merged_compute)
    non_compute = max(0.0, kernel_time - compute - idle)
    streams: dict[tuple[int, int], dict[str, Any]] = {}
    prev_end: dict[tuple[int, int], float] = {}
    ts, dur = g.ts, g.dur
    for i, key in zip(
        order,
        zip(map(g.device.__getitem__, order), map(g.stream.__getitem__, order), strict=True),
        strict=True,
    ):
        st = streams.get(key)
        start = ts[i]
        d = dur[i]
        end = start + d
        if st is None:
            streams[key] = {
                "device": key[0],
                "stream": key[1],
                "count": 1,
                "first": start,
                "last": end,
                "busy": d,
                "host_wait": 0.0,
                "kernel_wait": 0.0,
                "other": 0.0,
            }
            prev_end[key] = end
            continue
        st["count"] += 1
        st["busy"] += d
        pe = prev_end[key]
        gap = start - pe
        if gap > 0:
            lt = launch_ts[i]
            if lt is not None and lt > pe:
                st["host_wait"] += gap
            elif gap < CONSECUTIVE_KERNEL_DELAY_US:
                st["kernel_wait"] += gap
            else:
                st["other"] += gap
        if end > pe:
            prev_end[key] = end
        if end > st["last"]:
            st["last"] = end
    # The largest gaps with nothing running on any stream.
    gaps = sorted(
        (
            (merged_all[0][k + 1] - merged_all[1][k], merged_all[1][k])
            for k in range(len(merged_all[0]) - 1)
        ),
        reverse=True,
    )[:5]
    stream_rows = []
    for st in sorted(streams.values(), key=lambda s: -s["busy"]):
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
    order: list[int],
    merged_compute: tuple[array, array],
    comm: tuple[array, array] | None = None,
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


def _graph_launches(trace: ChromeTrace, launch_of: array, index: _LaunchIndex) -> dict[str, Any]:
    lc = trace.launches
    g = trace.gpu
    n_graph = sum(1 for k in lc.kind if k == LAUNCH_GRAPH)
    n_eager = sum(1 for k in lc.kind if k == LAUNCH_KERNEL)
    n_mem = sum(1 for k in lc.kind if k == LAUNCH_MEMORY)
    per_graph: dict[int, int] = {}
    graph_kernels = eager_kernels = unlinked = memory_ops = 0
    graph_ms = eager_ms = 0.0
    delays: list[float] = []
    for i in range(len(g)):
        k = launch_of[i]
        if k < 0:
            unlinked += 1
            continue
        kind = index.kind[k]
        if g.kind[i] == MEMORY:
            memory_ops += 1
            continue
        if kind == LAUNCH_GRAPH:
            graph_kernels += 1
            graph_ms += g.dur[i]
            per_graph[k] = per_graph.get(k, 0) + 1
        elif kind == LAUNCH_KERNEL:
            eager_kernels += 1
            eager_ms += g.dur[i]
            if len(delays) < 1_000_000:
                delays.append(g.ts[i] - index.end[k])
    linked = graph_kernels + eager_kernels
    return {
        "graph_launches": n_graph,
        "eager_kernel_launches": n_eager,
        "memory_launches": n_mem,
        "kernels_from_graphs": graph_kernels,
        "kernels_from_eager_launches": eager_kernels,
        "memory_ops_with_linked_launch": memory_ops,
        "activities_without_linked_launch": unlinked,
        "graph_kernel_time_ms": _r(graph_ms / 1e3),
        "eager_kernel_time_ms": _r(eager_ms / 1e3),
        "max_kernels_per_graph_launch": max(per_graph.values(), default=0),
        "graph_launch_fraction": _r(graph_kernels / linked, 4) if linked else None,
        "eager_launch_delay_p50_us": _r(percentile(delays, 50)),
        "eager_launch_delay_p99_us": _r(percentile(delays, 99)),
    }


def _long_cpu_ops(
    trace: ChromeTrace, merged_all: tuple[array, array], origin: float
) -> list[dict[str, Any]]:
    """Longest CPU ops that launched nothing: time the host spent while the GPU waited."""
    lc = trace.launches
    by_tid: dict[int, array] = {}
    for i in range(len(lc)):
        by_tid.setdefault(lc.tid[i], array("d")).append(lc.ts[i])
    for key in by_tid:
        by_tid[key] = array("d", sorted(by_tid[key]))
    picked: list[Span] = []
    out = []
    for op in trace.cpu_ops:
        if len(out) >= TOP_CPU_OPS or op.dur <= 0:
            break
        ts = by_tid.get(op.tid)
        if ts is not None:
            k = bisect.bisect_left(ts, op.ts)
            if k < len(ts) and ts[k] <= op.ts + op.dur:
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
    trace: ChromeTrace, order: list[int], launch_ts: list[float | None], origin: float
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
    for i in order:
        t = launch_ts[i]
        if t is None:
            t = g.ts[i]
        k = bisect.bisect_right(starts, t) - 1
        if k < 0 or t > spans[k].ts + spans[k].dur:
            continue
        step_of[i] = k
        kernels[k] += 1
        s, e = g.ts[i], g.ts[i] + g.dur[i]
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
    order = sorted(range(len(g)), key=g.ts.__getitem__)
    index = _LaunchIndex.build(trace)
    launch_of = index.find_all(g.corr)
    launch_ts: list[float | None] = [index.ts[k] if k >= 0 else None for k in launch_of]

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
