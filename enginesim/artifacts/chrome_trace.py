"""Render simulated engine steps as a torch.profiler (Kineto) Chrome trace of one TP rank.

The trace is what ``VLLM_TORCH_PROFILER_DIR`` would leave behind on a vLLM V1 worker: a
``ProfilerStep#N`` span per step, vLLM's ``execute_new_{n}_cached_{m}`` annotation around
the forward, kernels on stream 7 linked to their launches by correlation ids and ``ac2g``
flows, and a trailing NCCL all-reduce. Analysis code gets the same shape as a real
PyTorch >= 2.4 export (float microseconds relative to ``baseTimeNanoseconds``), so Atlas'
parser is exercised by the simulator exactly as it will be by customer uploads.

The forward is deliberately compressed to one representative "layer group" (``layers``
repeats it): kernel *durations* follow the Atlas cost model, kernel *counts* do not, which
keeps a 2k-step trace cheap to build.
"""

from __future__ import annotations

import gzip as _gzip
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .records import DEFAULT_EPOCH_UNIX, StepRecord

# Kineto floors baseTimeNanoseconds to a quarter of a Gregorian year (365.2425 / 4 days);
# every real sample's base is a multiple of this many seconds.
KINETO_QUARTER_S = 7_889_238

COMPUTE_STREAM = 7
_CBID_LAUNCH_KERNEL = 211
_CBID_GRAPH_LAUNCH = 311
_CBID_MEMCPY_ASYNC = 41
_NUM_SMS = 132

_H100_PROPS = {
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85018279936,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": _NUM_SMS,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}

K_RMSNORM = (
    "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16*, "
    "c10::BFloat16 const*, float, int, int)"
)
K_GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
K_ROPE = (
    "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, "
    "c10::BFloat16*, c10::BFloat16 const*, int, long, long, long, int, int, int)"
)
K_CACHE = (
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, "
    "(vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, "
    "__nv_bfloat16*, long const*, long, long, long, long, int, int, int, float const*, "
    "float const*)"
)
K_ATTN_PREFILL = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, true, true, false, false>(flash::Flash_fwd_params)"
)
K_ATTN_DECODE = (
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, "
    "false, true, false, false, true, true, false, false, false>(flash::Flash_fwd_params)"
)
K_ACT = (
    "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<"
    "c10::BFloat16>(c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)"
)
K_NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
MEMCPY_DTOH = "Memcpy DtoH (Device -> Pinned)"

# Share of a step's dense work (GEMMs, norms, ...) per kernel; attention gets the rest.
_ATTN_SHARE = 0.25
_PRE_ATTN = (("norm", 0.01), ("qkv", 0.16), ("rope", 0.01), ("cache", 0.01))
_POST_ATTN = (("o_proj", 0.08), ("norm", 0.01), ("gate_up", 0.30), ("act", 0.02), ("down", 0.15))

# kernel name, launching aten/vLLM op, registers/thread, static shared memory, threads/block
_KERNEL_KINDS: dict[str, tuple[str, str, int, int, int]] = {
    "norm": (K_RMSNORM, "_C::fused_add_rms_norm", 38, 0, 1024),
    "qkv": (K_GEMM, "aten::mm", 168, 213248, 384),
    "rope": (K_ROPE, "_C::rotary_embedding", 40, 0, 256),
    "cache": (K_CACHE, "_C_cache_ops::reshape_and_cache_flash", 32, 0, 1024),
    "attn_prefill": (K_ATTN_PREFILL, "vllm::unified_attention_with_output", 255, 49152, 128),
    "attn_decode": (K_ATTN_DECODE, "vllm::unified_attention_with_output", 255, 98304, 128),
    "o_proj": (K_GEMM, "aten::mm", 168, 213248, 384),
    "gate_up": (K_GEMM, "aten::mm", 168, 213248, 384),
    "act": (K_ACT, "_C::silu_and_mul", 28, 0, 1024),
    "down": (K_GEMM, "aten::mm", 168, 213248, 384),
    "nccl": (K_NCCL_ALLREDUCE, "vllm::all_reduce", 96, 87568, 640),
}

# CPU-side costs in microseconds (typical eager launch overheads on a Sapphire Rapids host).
_PRE_EXEC_US = 120.0
_OP_SPACING_US = 9.0
_LAUNCH_OFFSET_US = 2.0
_LAUNCH_DUR_US = 5.0
_LAUNCH_LATENCY_US = 4.0
_KERNEL_GAP_US = 1.5
_GRAPH_LAUNCH_DUR_US = 14.0
_MEMCPY_US = 2.4
_TAIL_US = 40.0


def kineto_base_time_ns(unix_s: float) -> int:
    """``baseTimeNanoseconds`` Kineto would write for a trace recorded at ``unix_s``."""
    whole = int(unix_s)
    return (whole - whole % KINETO_QUARTER_S) * 1_000_000_000


@dataclass
class _Kernel:
    kind: str
    dur_us: float
    grid: tuple[int, int, int]
    tokens: int


@dataclass
class _Ids:
    """Monotonic id sources; Kineto ids are unique per trace, so one object per render."""

    external: int = 1024
    correlation: int = 68000
    ev_idx: int = 0
    graph_id: int = 0

    def next_external(self) -> int:
        self.external += 1
        return self.external

    def next_correlation(self) -> int:
        self.correlation += 1
        return self.correlation

    def next_ev(self) -> int:
        self.ev_idx += 1
        return self.ev_idx


def _q(x: float) -> float:
    """Kineto's 3-decimal microseconds; ~4x cheaper than round(x, 3) on this hot path."""
    return int(x * 1000.0 + 0.5) / 1000.0


class _Clock:
    """Converts simulated seconds to Kineto's relative float-microsecond ``ts``."""

    def __init__(self, epoch_unix: float, base_ns: int) -> None:
        # Subtract in seconds first: absolute microseconds since 1970 would lose the
        # nanosecond digits in a float.
        self._offset_us = (epoch_unix - base_ns / 1e9) * 1e6

    def us(self, t_s: float) -> float:
        return _q(self._offset_us + t_s * 1e6)


def _forward_kernels(
    step: StepRecord,
    *,
    cost_per_prefill_token_s: float,
    decode_step_s: float,
    layers: int,
    scale: float,
) -> list[_Kernel]:
    """The step's compute kernels; durations sum to ``scale`` x the Atlas cost model."""
    prefill_s = [new * cost_per_prefill_token_s for new, _ in step.prefill_chunks if new > 0]
    decode_s = decode_step_s if step.num_decode > 0 else 0.0
    dense_s = (sum(prefill_s) + decode_s) * (1.0 - _ATTN_SHARE)
    if dense_s <= 0.0:
        return []
    tokens = step.prefill_tokens + step.num_decode
    m_tiles = max(1, math.ceil(tokens / 128))
    kernels: list[_Kernel] = []

    def dense(kind: str, share: float) -> None:
        dur = dense_s * share / (1.0 - _ATTN_SHARE) / layers * scale * 1e6
        grid = (m_tiles, 32, 1) if kind in ("qkv", "o_proj", "gate_up", "down") else (tokens, 1, 1)
        kernels.append(_Kernel(kind, dur, grid, tokens))

    chunks = [(new, before) for new, before in step.prefill_chunks if new > 0]
    for _ in range(layers):
        for kind, share in _PRE_ATTN:
            dense(kind, share)
        for (new, _before), cost_s in zip(chunks, prefill_s, strict=True):
            dur = cost_s * _ATTN_SHARE / layers * scale * 1e6
            kernels.append(_Kernel("attn_prefill", dur, (max(1, math.ceil(new / 128)), 16, 1), new))
        if decode_s:
            dur = decode_s * _ATTN_SHARE / layers * scale * 1e6
            kernels.append(_Kernel("attn_decode", dur, (step.num_decode, 16, 4), step.num_decode))
        for kind, share in _POST_ATTN:
            dense(kind, share)
    return kernels


class _TraceBuilder:
    def __init__(
        self,
        *,
        tp_size: int,
        rank: int,
        os_pid: int,
        clock: _Clock,
        tp_ranks: Sequence[int],
    ) -> None:
        self.tp_size = tp_size
        self.rank = rank
        self.device = rank
        self.os_pid = os_pid
        self.clock = clock
        self.tp_ranks = list(tp_ranks)
        self.ids = _Ids()
        self.cpu: list[dict] = []
        self.gpu: list[dict] = []
        self._kernel_args: dict[tuple, dict] = {}

    # ---- primitive events -------------------------------------------------------------
    def _host_event(self, category: str, name: str, ts: float, dur: float) -> int:
        """A host-thread complete event (cpu_op or user_annotation); returns its External id."""
        ext = self.ids.next_external()
        self.cpu.append(
            {
                "ph": "X",
                "cat": category,
                "name": name,
                "pid": self.os_pid,
                "tid": self.os_pid,
                "ts": _q(ts),
                "dur": _q(dur),
                "args": {"External id": ext, "Record function id": 0, "Ev Idx": self.ids.next_ev()},
            }
        )
        return ext

    def annotation(self, name: str, ts: float, dur: float) -> int:
        return self._host_event("user_annotation", name, ts, dur)

    def gpu_annotation(self, name: str, ext: int, ts: float, dur: float) -> None:
        # Kineto widens gpu_user_annotation by 1 ns on each side for the viewer.
        self.gpu.append(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": name,
                "pid": self.device,
                "tid": COMPUTE_STREAM,
                "ts": _q(ts - 0.001),
                "dur": _q(dur + 0.002),
                "args": {"External id": ext},
            }
        )

    def cpu_op(self, name: str, ts: float, dur: float) -> int:
        return self._host_event("cpu_op", name, ts, dur)

    def runtime(self, name: str, cbid: int, ext: int, ts: float, dur: float) -> int:
        corr = self.ids.next_correlation()
        self.gpu.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": self.os_pid,
                "tid": self.os_pid,
                "ts": _q(ts),
                "dur": _q(dur),
                "args": {"External id": ext, "cbid": cbid, "correlation": corr},
            }
        )
        self.gpu.append(
            {
                "ph": "s",
                "id": corr,
                "pid": self.os_pid,
                "tid": self.os_pid,
                "ts": _q(ts),
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        return corr

    def _flow_end(self, corr: int, ts: float) -> None:
        self.gpu.append(
            {
                "ph": "f",
                "id": corr,
                "pid": self.device,
                "tid": COMPUTE_STREAM,
                "ts": _q(ts),
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )

    def _kernel_template(self, k: _Kernel) -> dict:
        """Launch-shape args of a kernel; cached because shapes repeat every step."""
        _name, _op, regs, smem, threads = _KERNEL_KINDS[k.kind]
        blocks = k.grid[0] * k.grid[1] * k.grid[2]
        blocks_per_sm = blocks / _NUM_SMS
        warps_per_sm = blocks_per_sm * threads / 32
        args: dict = {
            "External id": 0,
            "queued": 0,
            "device": self.device,
            "context": 1,
            "stream": COMPUTE_STREAM,
            "correlation": 0,
            "registers per thread": regs,
            "shared memory": smem,
            "blocks per SM": round(blocks_per_sm, 6),
            "warps per SM": round(warps_per_sm, 6),
            "grid": list(k.grid),
            "block": [threads, 1, 1],
            "est. achieved occupancy %": min(100, int(warps_per_sm / 64 * 100)),
        }
        if k.kind == "nccl":
            args.update(
                {
                    "Collective name": "allreduce",
                    "In msg nelems": k.tokens * 8192,
                    "Out msg nelems": k.tokens * 8192,
                    "Group size": self.tp_size,
                    "dtype": "BFloat16",
                    "In split size": "[]",
                    "Out split size": "[]",
                    "Process Group Name": "1",
                    "Process Group Description": "tp",
                    "Process Group Ranks": str(self.tp_ranks),
                }
            )
        return args

    def kernel(
        self,
        k: _Kernel,
        *,
        ext: int,
        corr: int,
        ts: float,
        dur: float,
        graph: tuple[int, int] | None,
    ) -> None:
        key = (k.kind, k.grid, k.tokens if k.kind == "nccl" else 0)
        template = self._kernel_args.get(key)
        if template is None:
            template = self._kernel_args[key] = self._kernel_template(k)
        args = template.copy()
        args["External id"] = ext
        args["correlation"] = corr
        if graph is not None:
            args["graph id"], args["graph node id"] = graph
        self.gpu.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": _KERNEL_KINDS[k.kind][0],
                "pid": self.device,
                "tid": COMPUTE_STREAM,
                "ts": _q(ts),
                "dur": _q(dur),
                "args": args,
            }
        )
        self._flow_end(corr, ts)

    def memcpy(self, *, ext: int, corr: int, ts: float, dur: float, nbytes: int) -> None:
        self.gpu.append(
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": MEMCPY_DTOH,
                "pid": self.device,
                "tid": COMPUTE_STREAM,
                "ts": _q(ts),
                "dur": _q(dur),
                "args": {
                    "External id": ext,
                    "device": self.device,
                    "context": 1,
                    "stream": COMPUTE_STREAM,
                    "correlation": corr,
                    "bytes": nbytes,
                    "memory bandwidth (GB/s)": nbytes / (dur * 1e3) if dur > 0 else 0.0,
                },
            }
        )
        self._flow_end(corr, ts)


def _launch_groups(kernels: list[_Kernel], step: StepRecord) -> list[list[_Kernel]]:
    """How kernels are launched: one per launch (eager) or per graph piece.

    vLLM's default FULL_AND_PIECEWISE mode replays a FULL graph for uniform decode batches
    and PIECEWISE graphs (attention launched eagerly in between) for mixed batches.
    """
    if not step.cuda_graph:
        return [[k] for k in kernels]
    if not step.prefill_chunks:
        return [kernels]
    groups: list[list[_Kernel]] = [[]]
    for k in kernels:
        if k.kind.startswith("attn"):
            groups.append([k])
            groups.append([])
        else:
            groups[-1].append(k)
    return [g for g in groups if g]


def _render_step(
    b: _TraceBuilder,
    step: StepRecord,
    *,
    cost_per_prefill_token_s: float,
    decode_step_s: float,
    allreduce_base_s: float,
    layers: int,
) -> None:
    slow = step.rank_slowdown or (1.0,) * b.tp_size
    own = slow[b.rank] if b.rank < len(slow) else 1.0
    slowest = max(slow)
    s0 = b.clock.us(step.start_s)
    s1 = b.clock.us(step.start_s + step.duration_s)
    step_name = f"ProfilerStep#{step.index}"
    step_ext = b.annotation(step_name, s0, s1 - s0)

    kernels = _forward_kernels(
        step,
        cost_per_prefill_token_s=cost_per_prefill_token_s,
        decode_step_s=decode_step_s,
        layers=layers,
        scale=own,
    )
    if not kernels:
        return
    tokens = step.prefill_tokens + step.num_decode
    dense_base_s = step.prefill_tokens * cost_per_prefill_token_s + (
        decode_step_s if step.num_decode else 0.0
    )
    # The all-reduce cannot finish before the slowest rank arrives, so this rank's NCCL
    # kernel absorbs the difference between its own compute and the straggler's.
    wait_s = (slowest - own) * dense_base_s
    kernels.append(_Kernel("nccl", (allreduce_base_s + wait_s) * 1e6, (4, 1, 1), tokens))

    pre_us = min(_PRE_EXEC_US, (s1 - s0) * 0.02)
    gc_us = min(step.gc_pause_s * 1e6, max(0.0, s1 - s0 - pre_us))
    exec_start = s0 + pre_us + gc_us  # the gc pause is an empty gap before the forward
    groups = _launch_groups(kernels, step)
    cpu_us = len(groups) * _OP_SPACING_US + _TAIL_US
    gpu_us = sum(k.dur_us for k in kernels) + _MEMCPY_US
    gaps_us = len(kernels) * _KERNEL_GAP_US + _LAUNCH_OFFSET_US + _LAUNCH_LATENCY_US
    budget = max(0.0, s1 - exec_start - gaps_us - _TAIL_US)
    fit = 1.0 if gpu_us <= budget else budget / gpu_us
    spacing = _OP_SPACING_US if cpu_us <= s1 - exec_start else (s1 - exec_start) / (len(groups) + 6)

    exec_name = f"execute_new_{step.num_new_requests}_cached_{step.num_cached_requests}"
    exec_idx = len(b.cpu)
    exec_ext = b.annotation(exec_name, exec_start, 0.0)
    cursor = exec_start + spacing
    gpu_free = exec_start
    first_kernel = None
    for group in groups:
        eager = not step.cuda_graph or (len(group) == 1 and group[0].kind.startswith("attn"))
        if eager:
            k = group[0]
            op_name = _KERNEL_KINDS[k.kind][1]
            ext = b.cpu_op(op_name, cursor, spacing * 0.8)
            launch_ts = cursor + min(_LAUNCH_OFFSET_US, spacing * 0.2)
            launch_dur = min(_LAUNCH_DUR_US, spacing * 0.5)
            corr = b.runtime("cudaLaunchKernel", _CBID_LAUNCH_KERNEL, ext, launch_ts, launch_dur)
            graph = None
        else:
            launch_ts = cursor
            launch_dur = min(_GRAPH_LAUNCH_DUR_US, spacing * 0.8)
            ext = b.ids.next_external()
            corr = b.runtime("cudaGraphLaunch", _CBID_GRAPH_LAUNCH, ext, launch_ts, launch_dur)
            b.ids.graph_id += 1
            graph = (b.ids.graph_id, 0)
        start = max(gpu_free, launch_ts + launch_dur + _LAUNCH_LATENCY_US * fit)
        for node, k in enumerate(group):
            dur = k.dur_us * fit
            b.kernel(
                k,
                ext=ext,
                corr=corr,
                ts=start,
                dur=dur,
                graph=None if graph is None else (graph[0], node + 1),
            )
            if first_kernel is None:
                first_kernel = start
            gpu_free = start + dur
            start = gpu_free + _KERNEL_GAP_US * fit
        cursor += spacing

    # Sampled token ids come back with a blocking copy: the CPU waits here for the GPU.
    ext = b.cpu_op("aten::copy_", cursor, 0.0)
    copy_op = b.cpu[-1]
    corr = b.runtime("cudaMemcpyAsync", _CBID_MEMCPY_ASYNC, ext, cursor + 1.0, 0.0)
    copy_rt = b.gpu[-2]
    memcpy_ts = max(gpu_free, cursor + 1.0 + _LAUNCH_LATENCY_US * fit)
    memcpy_dur = _MEMCPY_US * fit
    b.memcpy(ext=ext, corr=corr, ts=memcpy_ts, dur=memcpy_dur, nbytes=8 * max(1, tokens))
    done = memcpy_ts + memcpy_dur
    copy_rt["dur"] = _q(done + 1.0 * fit - (cursor + 1.0))
    copy_op["dur"] = _q(done + 2.0 * fit - cursor)
    exec_end = min(s1, done + 10.0 * fit)
    b.cpu[exec_idx]["dur"] = _q(exec_end - exec_start)
    assert first_kernel is not None
    b.gpu_annotation(step_name, step_ext, first_kernel, done - first_kernel)
    b.gpu_annotation(exec_name, exec_ext, first_kernel, done - first_kernel)


def _metadata_events(b: _TraceBuilder, ts: float) -> list[dict]:
    events: list[dict] = []

    def meta(name: str, pid: int | str, tid: int, args: dict) -> None:
        events.append({"name": name, "ph": "M", "ts": _q(ts), "pid": pid, "tid": tid, "args": args})

    meta("process_name", b.os_pid, 0, {"name": "python3"})
    meta("process_labels", b.os_pid, 0, {"labels": "CPU"})
    meta("process_sort_index", b.os_pid, 0, {"sort_index": b.os_pid})
    for dev in range(b.tp_size):
        meta("process_name", dev, 0, {"name": "python3"})
        meta("process_labels", dev, 0, {"labels": f"GPU {dev}"})
        meta("process_sort_index", dev, 0, {"sort_index": 5000000 + dev})
    meta("thread_name", b.device, COMPUTE_STREAM, {"name": f"stream {COMPUTE_STREAM} "})
    meta("thread_sort_index", b.device, COMPUTE_STREAM, {"sort_index": COMPUTE_STREAM})
    meta("thread_name", b.os_pid, b.os_pid, {"name": f"thread {b.os_pid} (python3)"})
    meta("thread_sort_index", b.os_pid, b.os_pid, {"sort_index": b.os_pid})
    return events


def render_chrome_trace(
    steps: Sequence[StepRecord],
    *,
    tp_size: int,
    cost_per_prefill_token_s: float,
    decode_step_s: float,
    pid: int = 0,
    epoch_unix: float = DEFAULT_EPOCH_UNIX,
    rank: int = 0,
    layers: int = 1,
    allreduce_base_s: float = 60e-6,
    trace_name: str | None = None,
) -> dict:
    """Kineto-format trace of TP ``rank`` over ``steps`` (JSON-ready dict).

    ``pid`` is the worker's OS process id used for CPU rows (0 picks a realistic one); GPU
    rows use the device ordinal, which equals ``rank`` for a single-node TP group. Kernel
    time per step follows the cost model times ``rank_slowdown[rank]``; when a step's
    ``duration_s`` is too short for that work, its GPU activity is compressed to fit so
    every kernel stays inside its ProfilerStep.
    """
    if tp_size < 1 or not 0 <= rank < tp_size:
        raise ValueError(f"rank {rank} is outside a TP group of size {tp_size}")
    if layers < 1:
        raise ValueError("layers must be >= 1")
    ordered = sorted(steps, key=lambda s: (s.start_s, s.index))
    os_pid = pid if pid > 0 else 306 + rank
    first = ordered[0].start_s if ordered else 0.0
    last = max((s.start_s + s.duration_s for s in ordered), default=first)
    base_ns = kineto_base_time_ns(epoch_unix + first)
    clock = _Clock(epoch_unix, base_ns)
    b = _TraceBuilder(
        tp_size=tp_size, rank=rank, os_pid=os_pid, clock=clock, tp_ranks=range(tp_size)
    )
    for step in ordered:
        _render_step(
            b,
            step,
            cost_per_prefill_token_s=cost_per_prefill_token_s,
            decode_step_s=decode_step_s,
            allreduce_base_s=allreduce_base_s,
            layers=layers,
        )
    window_start = clock.us(first) - 150.0
    window_end = clock.us(last) + 80.0
    tail = [
        {
            "ph": "X",
            "cat": "Trace",
            "ts": _q(window_start),
            "dur": _q(window_end - window_start),
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        },
        {
            "name": "process_sort_index",
            "ph": "M",
            "ts": _q(window_start),
            "pid": "Spans",
            "tid": 0,
            "args": {"sort_index": 536870912},
        },
        {
            "name": "Iteration Start: PyTorch Profiler",
            "ph": "i",
            "s": "g",
            "pid": "Traces",
            "tid": "Trace PyTorch Profiler",
            "ts": _q(window_start),
        },
        {
            "name": "Record Window End",
            "ph": "i",
            "s": "g",
            "pid": "",
            "tid": "",
            "ts": _q(window_end),
        },
    ]
    events = b.cpu + b.gpu + _metadata_events(b, window_start + 120.0) + tail
    fingerprint = hashlib.sha256(
        f"{epoch_unix}|{rank}|{len(ordered)}|{first}|{last}".encode()
    ).hexdigest()
    start_ns = round((epoch_unix + first) * 1e9)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": dev, **_H100_PROPS} for dev in range(tp_size)],
        "record_shapes": 0,
        "with_stack": 0,
        "profile_memory": 0,
        "with_flops": 0,
        "with_modules": 0,
        "trace_id": fingerprint[:32].upper(),
        "cupti_version": 24,
        "cuda_runtime_version": 12080,
        "cuda_driver_version": 12080,
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": tp_size,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": tp_size,
                    "ranks": list(range(tp_size)),
                }
            ],
            "nccl_version": "2.26.2",
        },
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
        "traceEvents": events,
        "traceName": trace_name
        or f"/workspace/vllm_traces/atlas-tp{tp_size}-0_{os_pid}.{start_ns}.pt.trace.json",
    }


def write_chrome_trace(steps: Sequence[StepRecord], *, gzip: bool = False, **kw) -> bytes:
    """Serialized trace; ``gzip=True`` gives the ``.pt.trace.json.gz`` bytes (mtime 0)."""
    data = json.dumps(render_chrome_trace(steps, **kw)).encode()
    return _gzip.compress(data, compresslevel=6, mtime=0) if gzip else data
