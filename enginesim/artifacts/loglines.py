"""vLLM and SGLang log lines in the exact shapes operators grep (engine-metrics.md §6, §2.5).

Builders return ``LogMessage`` records rather than strings so the simulator decides *when*
and *in which process* a line appears; ``render_messages`` then applies vLLM's logger
format, including its habit of repeating the prefix on every continuation line of a
multi-line record (tracebacks), which log parsers must cope with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

_PY = "/usr/local/lib/python3.12/dist-packages"
GiB = 1 << 30

DEFAULT_PIDS: dict[str, int] = {
    "APIServer": 1,
    "EngineCore_DP0": 241,
    **{f"Worker_TP{i}": 306 + i for i in range(8)},
}


class LogMessage(NamedTuple):
    """One log record; ``level`` None marks a raw stderr line (tqdm, uvicorn, print)."""

    level: str | None
    fileinfo: str
    lineno: int
    message: str
    process: str | None = None  # overrides the renderer's default process name
    pid: int | None = None  # overrides the pid looked up for the process
    delay_s: float = 0.0  # offset from the batch's base timestamp


def vllm_line(
    ts: datetime,
    level: str,
    fileinfo: str,
    lineno: int,
    message: str,
    *,
    process: str | None = "EngineCore_DP0",
    pid: int = 241,
    bracket: bool = True,
    crlf: bool = True,
) -> str:
    """Format one record like vLLM's logger; ``process=None`` gives the 0.10.x shape.

    ``bracket=False`` gives the pre-0.7 V0 shape ``INFO 05-30 06:41:50 file.py:1562] msg``.
    vLLM's NewLineFormatter replaces each newline in a record with ``"\\r\\n" + prefix``;
    ``crlf=False`` drops the carriage return for consumers that want plain lines.
    """
    where = f"[{fileinfo}:{lineno}]" if bracket else f"{fileinfo}:{lineno}]"
    head = f"({process} pid={pid}) " if process else ""
    prefix = f"{head}{level} {ts:%m-%d %H:%M:%S} {where} "
    return prefix + message.replace("\n", ("\r\n" if crlf else "\n") + prefix)


def render_messages(
    messages: Sequence[LogMessage],
    start: datetime,
    *,
    process: str | None = "EngineCore_DP0",
    pids: Mapping[str, int] = DEFAULT_PIDS,
    crlf: bool = True,
) -> list[str]:
    """Lines for ``messages`` stamped ``start + delay_s``; multi-line records stay one item."""
    out = []
    for m in messages:
        proc = m.process or process
        pid = m.pid if m.pid is not None else pids.get(proc or "", 0)
        if m.level is None:
            out.append(f"({proc} pid={pid}) {m.message}" if proc else m.message)
            continue
        out.append(
            vllm_line(
                start + timedelta(seconds=m.delay_s),
                m.level,
                m.fileinfo,
                m.lineno,
                m.message,
                process=proc,
                pid=pid,
                crlf=crlf,
            )
        )
    return out


def _gib(value: float) -> str:
    """vLLM's ``format_gib``: GiB rounded to 2 decimals, printed with ``%s``."""
    return str(round(value, 2))


def startup_memory_messages(
    weights_gib: float,
    load_seconds: float,
    kv_cache_gib: float,
    kv_tokens: int,
    max_model_len: int,
    concurrency: float,
    *,
    tp_size: int = 1,
    init_seconds: float | None = None,
    compile_seconds: float | None = None,
    merged_kv_line: bool = False,
) -> list[LogMessage]:
    """Model-load and KV-budget lines; workers log per rank when ``tp_size > 1``."""
    ranks = [f"Worker_TP{r}" for r in range(tp_size)] if tp_size > 1 else [None]
    msgs = [
        LogMessage(
            "INFO",
            "gpu_model_runner.py",
            2602,
            f"Model loading took {_gib(weights_gib)} GiB memory and {load_seconds:.6f} seconds",
            process=p,
        )
        for p in ranks
    ]
    msgs += [
        LogMessage(
            "INFO",
            "gpu_worker.py",
            298,
            f"Available KV cache memory: {_gib(kv_cache_gib)} GiB",
            process=p,
            delay_s=1.0,
        )
        for p in ranks
    ]
    size = f"GPU KV cache size: {kv_tokens:,} tokens"
    conc = f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"
    if merged_kv_line:
        msgs.append(LogMessage("INFO", "kv_cache_utils.py", 1291, f"{size}, {conc}", delay_s=1.0))
    else:
        msgs.append(LogMessage("INFO", "kv_cache_utils.py", 1291, size, delay_s=1.0))
        msgs.append(LogMessage("INFO", "kv_cache_utils.py", 1296, conc, delay_s=1.0))
    if init_seconds is not None:
        text = f"init engine (profile, create kv cache, warmup model) took {init_seconds:.2f} s"
        if compile_seconds is not None:
            text += f" (compilation: {compile_seconds:.2f} s)"
        msgs.append(LogMessage("INFO", "core.py", 250, text, delay_s=2.0))
    return msgs


def chunked_prefill_message(max_num_batched_tokens: int) -> LogMessage:
    return LogMessage(
        "INFO",
        "scheduler.py",
        205,
        f"Chunked prefill is enabled with max_num_batched_tokens={max_num_batched_tokens}.",
    )


def _interval(seconds: float) -> str:
    """tqdm's ``format_interval``."""
    mins, s = divmod(int(seconds), 60)
    h, m = divmod(mins, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def tqdm_done_line(desc: str, total: int, seconds: float) -> str:
    """A finished tqdm bar as it lands in a non-tty log (10-cell bar, ``{rate:5.2f}``)."""
    rate = total / seconds if seconds > 0 else 0.0
    if rate >= 1.0 or rate == 0.0:
        rate_fmt = f"{rate:5.2f}it/s" if rate else "?it/s"
    else:
        rate_fmt = f"{1 / rate:5.2f}s/it"
    bar = "\u2588" * 10
    return f"{desc}: 100%|{bar}| {total}/{total} [{_interval(seconds)}<00:00, {rate_fmt}]"


def graph_capture_messages(
    num_sizes: int,
    mode: str,
    seconds: float,
    gib: float,
    *,
    decode_sizes: int | None = None,
    legacy_v0: bool = False,
    process: str | None = None,
) -> list[LogMessage]:
    """Capture progress bars plus ``Graph capturing finished in N secs, took X.XX GiB``.

    ``mode`` is vLLM's ``CUDAGraphMode`` name. FULL_AND_PIECEWISE (the default) runs two
    sweeps: mixed prefill-decode batches as PIECEWISE, uniform decode batches as FULL.
    """
    done = f"Graph capturing finished in {seconds:.0f} secs, took {gib:.2f} GiB"
    if legacy_v0:
        return [
            LogMessage(
                "INFO",
                "model_runner.py",
                1302,
                "Capturing cudagraphs for decoding. This may lead to unexpected consequences "
                "if the model is not static. To run the model in eager mode, set "
                "'enforce_eager=True' or use '--enforce-eager' in the CLI. If out-of-memory "
                "error occurs during cudagraph capture, consider decreasing "
                "`gpu_memory_utilization` or switching to eager mode. You can also reduce "
                "the `max_num_seqs` as needed to decrease memory usage.",
                process=process,
            ),
            LogMessage(
                None,
                "",
                0,
                tqdm_done_line("Capturing CUDA graph shapes", num_sizes, seconds),
                process=process,
                delay_s=seconds,
            ),
            LogMessage("INFO", "model_runner.py", 1430, done, process=process, delay_s=seconds),
        ]
    sweeps = {
        "FULL_AND_PIECEWISE": [
            ("mixed prefill-decode", "PIECEWISE", num_sizes),
            ("decode", "FULL", decode_sizes or num_sizes),
        ],
        "PIECEWISE": [("mixed prefill-decode", "PIECEWISE", num_sizes)],
        "FULL": [("mixed prefill-decode", "FULL", num_sizes)],
        "FULL_DECODE_ONLY": [("decode", "FULL", decode_sizes or num_sizes)],
    }.get(mode)
    if sweeps is None:
        raise ValueError(f"unknown CUDAGraphMode {mode!r}")
    total = sum(n for _, _, n in sweeps)
    msgs: list[LogMessage] = []
    elapsed = 0.0
    for kind, runtime_mode, n in sweeps:
        share = seconds * n / total
        elapsed += share
        desc = f"Capturing CUDA graphs ({kind}, {runtime_mode})"
        line = tqdm_done_line(desc, n, share)
        msgs.append(LogMessage(None, "", 0, line, process=process, delay_s=elapsed))
    msgs.append(
        LogMessage("INFO", "gpu_model_runner.py", 3480, done, process=process, delay_s=seconds)
    )
    return msgs


def stats_message(
    prompt_tput: float,
    gen_tput: float,
    running: int,
    waiting: int,
    kv_usage_frac: float,
    prefix_hit_frac: float | None,
    preemptions: int,
    *,
    legacy: bool = False,
    v0: bool = False,
    engine_index: int = 0,
    swapped: int = 0,
    cpu_kv_usage_frac: float = 0.0,
) -> LogMessage:
    """The periodic ``LoggingStatLogger`` line (every 5 s).

    Default is the >= 0.12 shape, where ``Preemptions: N`` appears only when N > 0 and the
    prefix-cache part only when prefix caching is on (``prefix_hit_frac`` not None).
    ``legacy`` is the fixed 0.10-0.11 format; ``v0`` the V0 engine's (no preemptions).
    V1 logs from the API-server process; V0 from its single engine process.
    """
    head = (
        f"Avg prompt throughput: {prompt_tput:.1f} tokens/s, "
        f"Avg generation throughput: {gen_tput:.1f} tokens/s, Running: {running} reqs"
    )
    if v0:
        return LogMessage(
            "INFO",
            "metrics.py",
            351,
            f"{head}, Swapped: {swapped} reqs, Pending: {waiting} reqs, "
            f"GPU KV cache usage: {kv_usage_frac * 100:.1f}%, "
            f"CPU KV cache usage: {cpu_kv_usage_frac * 100:.1f}%.",
        )
    engine = f"Engine {engine_index:03d}: "
    if legacy:
        hit = (prefix_hit_frac or 0.0) * 100
        text = (
            f"{engine}{head}, Waiting: {waiting} reqs, "
            f"GPU KV cache usage: {kv_usage_frac * 100:.1f}%, Prefix cache hit rate: {hit:.1f}%"
        )
        return LogMessage("INFO", "loggers.py", 123, text, process="APIServer")
    parts = [f"{engine}{head}", f"Waiting: {waiting} reqs"]
    if preemptions > 0:
        parts.append(f"Preemptions: {preemptions}")
    parts.append(f"GPU KV cache usage: {kv_usage_frac * 100:.1f}%")
    if prefix_hit_frac is not None:
        parts.append(f"Prefix cache hit rate: {prefix_hit_frac * 100:.1f}%")
    return LogMessage("INFO", "loggers.py", 236, ", ".join(parts), process="APIServer")


def v0_preemption_message(request_id: str, mode: str, cumulative: int) -> LogMessage:
    """V0's WARNING, printed on every 50th preemption (V1 logs nothing per preemption)."""
    return LogMessage(
        "WARNING",
        "scheduler.py",
        1560,
        f"Sequence group {request_id} is preempted by {mode} mode because there is not "
        "enough KV cache space. This can affect the end-to-end performance. Increase "
        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
        f"total_num_cumulative_preemption={cumulative}",
    )


def format_size(nbytes: int) -> str:
    """c10's ``format_size`` used in CUDA OOM messages (2 decimals, binary units)."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= 1 << 20:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= 1 << 30:
        return f"{nbytes / (1 << 20):.2f} MiB"
    return f"{nbytes / (1 << 30):.2f} GiB"


def torch_oom_text(
    requested_bytes: int,
    device: int,
    total_bytes: int,
    free_bytes: int,
    process_in_use_bytes: int,
    allocated_bytes: int,
    private_pool_bytes: int,
    reserved_unallocated_bytes: int,
) -> str:
    """``str(torch.OutOfMemoryError)`` as CUDACachingAllocator builds it (torch >= 2.1)."""
    private = (
        f"with {format_size(private_pool_bytes)} allocated in private pools (e.g., CUDA Graphs), "
        if private_pool_bytes > 0
        else ""
    )
    return (
        f"CUDA out of memory. Tried to allocate {format_size(requested_bytes)}. "
        f"GPU {device} has a total capacity of {format_size(total_bytes)} of which "
        f"{format_size(free_bytes)} is free. Including non-PyTorch memory, this process has "
        f"{format_size(process_in_use_bytes)} memory in use. Of the allocated memory "
        f"{format_size(allocated_bytes)} is allocated by PyTorch, {private}and "
        f"{format_size(reserved_unallocated_bytes)} is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _traceback(frames: Sequence[tuple[str, int, str, str]], exc: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(exc)
    return "\n".join(lines)


def oom_messages(
    requested_bytes: int,
    free_bytes: int,
    *,
    device: int = 0,
    total_bytes: int = 85031714816,
    process_in_use_bytes: int,
    allocated_bytes: int,
    private_pool_bytes: int = 0,
    reserved_unallocated_bytes: int = 0,
    worker: str = "Worker_TP0",
) -> list[LogMessage]:
    """The crash cascade of a worker OOM in vLLM V1 (worker, engine core, API server).

    ``OomDetails`` from the memory snapshot carries matching numbers, so the log and the
    snapshot of one incident agree. The default total is what torch reports for an H100
    80GB (79.19 GiB).
    """
    oom = torch_oom_text(
        requested_bytes,
        device,
        total_bytes,
        free_bytes,
        process_in_use_bytes,
        allocated_bytes,
        private_pool_bytes,
        reserved_unallocated_bytes,
    )
    runner = f"{_PY}/vllm/v1/worker/gpu_model_runner.py"
    worker_tb = _traceback(
        [
            (f"{_PY}/vllm/v1/executor/multiproc_executor.py", 698, "worker_busy_loop",
             "output = func(*args, **kwargs)"),
            (f"{_PY}/torch/utils/_contextlib.py", 120, "decorate_context",
             "return func(*args, **kwargs)"),
            (f"{_PY}/vllm/v1/worker/gpu_worker.py", 541, "execute_model",
             "output = self.model_runner.execute_model(scheduler_output,"),
            (runner, 2436, "execute_model", "model_output = self.model("),
            (f"{_PY}/vllm/compilation/cuda_graph.py", 121, "__call__",
             "return self.runnable(*args, **kwargs)"),
            (f"{_PY}/vllm/model_executor/models/llama.py", 393, "forward",
             "hidden_states, residual = layer(positions, hidden_states, residual)"),
            (f"{_PY}/vllm/model_executor/layers/activation.py", 95, "forward_cuda",
             "out = torch.empty(output_shape, dtype=x.dtype, device=x.device)"),
        ],
        f"torch.OutOfMemoryError: {oom}",
    )  # fmt: skip
    engine_tb = _traceback(
        [
            (f"{_PY}/vllm/v1/engine/core.py", 701, "run_engine_core",
             "engine_core.run_busy_loop()"),
            (f"{_PY}/vllm/v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()"),
            (f"{_PY}/vllm/v1/engine/core.py", 754, "_process_engine_step",
             "outputs, model_executed = self.step_fn()"),
            (f"{_PY}/vllm/v1/engine/core.py", 284, "step",
             "model_output = self.execute_model_with_error_logging("),
            (f"{_PY}/vllm/v1/executor/multiproc_executor.py", 262, "get_response",
             "raise RuntimeError("),
        ],
        f"RuntimeError: Worker failed with error '{oom}', please check the stack trace "
        "above for the root cause",
    )  # fmt: skip
    api_tb = _traceback(
        [
            (f"{_PY}/vllm/v1/engine/async_llm.py", 439, "output_handler",
             "outputs = await engine_core.get_output_async()"),
            (f"{_PY}/vllm/v1/engine/core_client.py", 846, "get_output_async",
             "raise self._format_exception(outputs) from None"),
        ],
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
        "See stack trace (above) for the root cause.",
    )  # fmt: skip
    return [
        LogMessage("ERROR", "multiproc_executor.py", 703,
                   f"WorkerProc hit an exception.\n{worker_tb}", process=worker),
        LogMessage("ERROR", "core.py", 710, f"EngineCore encountered a fatal error.\n{engine_tb}",
                   process="EngineCore_DP0", delay_s=0.01),
        LogMessage("ERROR", "async_llm.py", 480, f"AsyncLLM output_handler failed.\n{api_tb}",
                   process="APIServer", delay_s=0.02),
    ]  # fmt: skip


def oom_messages_from_details(details: object, *, worker: str | None = None) -> list[LogMessage]:
    """``oom_messages`` fed from ``memory_snapshot.oom_details()`` so log and dump agree."""
    d = details  # duck-typed OomDetails: keeps this module free of the snapshot model
    return oom_messages(
        d.requested_bytes,  # type: ignore[attr-defined]
        d.device_free_bytes,  # type: ignore[attr-defined]
        device=d.device,  # type: ignore[attr-defined]
        total_bytes=d.total_bytes,  # type: ignore[attr-defined]
        process_in_use_bytes=d.process_in_use_bytes,  # type: ignore[attr-defined]
        allocated_bytes=d.allocated_bytes,  # type: ignore[attr-defined]
        private_pool_bytes=d.private_pool_allocated_bytes,  # type: ignore[attr-defined]
        reserved_unallocated_bytes=d.reserved_bytes - d.allocated_bytes,  # type: ignore[attr-defined]
        worker=worker or f"Worker_TP{d.device}",  # type: ignore[attr-defined]
    )


def restart_messages(
    *,
    version: str = "0.11.0",
    model: str = "atlas-70b",
    tp_size: int = 4,
    restart_after_s: float = 15.0,
    new_pids: Mapping[str, int] | None = None,
) -> list[LogMessage]:
    """Engine-core death, API server shutdown, and the process starting again.

    The caller follows these with ``startup_memory_messages`` etc. for the new process.
    """
    pids = dict(new_pids or {"APIServer": 1, "EngineCore_DP0": 212})
    api_pid = pids.get("APIServer")
    core_pid = pids.get("EngineCore_DP0")
    r = restart_after_s
    return [
        LogMessage("ERROR", "core_client.py", 564,
                   "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
                   process="APIServer", delay_s=0.05),
        LogMessage(None, "", 0, "INFO:     Shutting down", process="APIServer", delay_s=0.1),
        LogMessage(None, "", 0, "INFO:     Waiting for application shutdown.",
                   process="APIServer", delay_s=0.1),
        LogMessage(None, "", 0, "INFO:     Application shutdown complete.",
                   process="APIServer", delay_s=0.2),
        LogMessage(None, "", 0, "INFO:     Finished server process [1]",
                   process="APIServer", delay_s=0.2),
        LogMessage("INFO", "api_server.py", 1839, f"vLLM API server version {version}",
                   process="APIServer", pid=api_pid, delay_s=r),
        LogMessage("INFO", "utils.py", 233,
                   f"non-default args: {{'model': '{model}', 'tensor_parallel_size': {tp_size}, "
                   "'enable_chunked_prefill': True}",
                   process="APIServer", pid=api_pid, delay_s=r),
        LogMessage("INFO", "core.py", 77,
                   f"Initializing a V1 LLM engine (v{version}) with config: model='{model}', "
                   f"tensor_parallel_size={tp_size}, enforce_eager=False",
                   process="EngineCore_DP0", pid=core_pid, delay_s=r + 6.0),
    ]  # fmt: skip


def sglang_line(ts: datetime, message: str, *, tp_rank: int = 0, dp_rank: int | None = None) -> str:
    """SGLang's ``[%(asctime)s TP0] %(message)s`` (no level name; full date)."""
    ranks = f" DP{dp_rank} TP{tp_rank}" if dp_rank is not None else f" TP{tp_rank}"
    return f"[{ts:%Y-%m-%d %H:%M:%S}{ranks}] {message}"


def sglang_retract_message(
    retracted_reqs: int, new_tokens_gained: int, old_ratio: float, new_ratio: float
) -> str:
    """The WARNING SGLang logs when it retracts (preempts) decode requests."""
    return (
        "KV cache pool is full. Retract requests. "
        f"#retracted_reqs: {retracted_reqs}, #new_tokens_gained: {new_tokens_gained}, "
        f"#new_token_ratio: {old_ratio:.4f} -> {new_ratio:.4f}"
    )


def sglang_prefill_message(
    new_seq: int,
    new_token: int,
    cached_token: int,
    token_usage: float,
    running_req: int,
    queue_req: int,
    pending_token: int,
    cuda_graph: bool,
    input_throughput: float,
) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, "
        f"#cached-token: {cached_token}, token usage: {token_usage:.2f}, "
        f"#running-req: {running_req}, #queue-req: {queue_req}, "
        f"#pending-token: {pending_token}, cuda graph: {cuda_graph}, "
        f"input throughput (token/s): {input_throughput:.2f}"
    )


def sglang_decode_message(
    running_req: int,
    token: int,
    token_usage: float,
    cuda_graph: bool,
    gen_throughput: float,
    queue_req: int,
) -> str:
    return (
        f"Decode batch, #running-req: {running_req}, #token: {token}, "
        f"token usage: {token_usage:.2f}, cuda graph: {cuda_graph}, "
        f"gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue_req}"
    )
