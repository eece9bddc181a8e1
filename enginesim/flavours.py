"""Engine flavours of the simulator: one registry entry per ``--format``.

Each entry says everything that differs between the engines Atlas reads: the name the
CLI and the HTTP index use, the metric prefix, the /metrics renderer (which owns the wire
names: ``exposition/vllm.py``, ``exposition/sglang.py``), the default histogram bounds,
how the process writes its log (start-up, step statistics, retractions), the version it
answers on /version and the extra endpoints it serves (SGLang's /server_info). The engine,
its metrics and the HTTP server look the entry up by name and never branch on it, so a
new engine is one :data:`FLAVOURS` entry plus its renderer (and its log style if its log
differs).

``enginesim.draws`` draws formats from its own fixed list, so adding an entry here never
changes what an existing seed draws.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from enginesim.artifacts import loglines as L
from enginesim.config import EngineConfig, GiB
from enginesim.exposition import buckets as B
from enginesim.exposition import sglang, vllm

# An ``enginesim.engine.Engine``. Typed loosely: the engine imports this module, and the
# import-linter contract forbids the cycle even for type checking (as the renderers do).
Engine = Any

__all__ = ["FLAVOURS", "Flavour", "LogStyle", "SglangLogs", "VllmLogs", "get", "names"]


class LogStyle(Protocol):
    """How one engine's process writes its log: the lines the log parsers are tested on."""

    def emit(self, eng: Engine, t: float, messages: list[L.LogMessage]) -> None:
        """Write the flavour-neutral messages (OOM, crash, GC) in this engine's format."""

    def startup(
        self,
        eng: Engine,
        t: float,
        cfg: EngineConfig,
        took: float,
        total_blocks: int,
        reason: str | None,
    ) -> None:
        """The start-up lines: banner, memory budget, graph captures, ready."""

    def retracted(self, eng: Engine, t: float, n: int) -> None:
        """``n`` requests were preempted in this step."""

    def stats(self, eng: Engine, t: float, hit: float | None) -> None:
        """The periodic statistics line (every ``stats_interval_s``)."""


@dataclass(frozen=True, slots=True)
class VllmLogs:
    """vLLM's ``INFO MM-DD HH:MM:SS [file:line]`` records; V0's stats line differs."""

    v0: bool = False

    def emit(self, eng: Engine, t: float, messages: list[L.LogMessage]) -> None:
        for line in L.render_messages(messages, eng._ts(t), pids=eng.pids):
            eng.log.write_line(line)
            eng.recent_lines.append((t, line))

    def startup(
        self,
        eng: Engine,
        t: float,
        cfg: EngineConfig,
        took: float,
        total_blocks: int,
        reason: str | None,
    ) -> None:
        tp = eng.c.tp_size
        msgs: list[L.LogMessage] = []
        if reason:
            msgs += L.restart_messages(
                version="0.33.0",
                model=cfg.model_name,
                tp_size=tp,
                restart_after_s=0.0,
                new_pids=eng.pids,
            )[5:]
        else:
            msgs.append(
                L.LogMessage(
                    "INFO", "api_server.py", 1839, "vLLM API server version 0.33.0", "APIServer"
                )
            )
        if cfg.enable_chunked_prefill:
            msgs.append(L.chunked_prefill_message(cfg.max_num_batched_tokens))
        total_tokens = total_blocks * cfg.block_size
        msgs += L.startup_memory_messages(
            eng.c.weights_bytes_per_rank / GiB,
            41.372518,
            eng.gpu.mem.kv_pool / GiB,
            total_tokens,
            cfg.max_model_len,
            total_tokens / cfg.max_model_len,
            tp_size=tp,
            merged_kv_line=True,
        )
        sizes = cfg.capture_sizes
        if sizes:
            n_dec = len([x for x in sizes if x <= cfg.max_num_seqs]) or 1
            for m_ in L.graph_capture_messages(
                len(sizes),
                "FULL_AND_PIECEWISE",
                max(1.0, len(sizes) / 5),
                took,
                decode_sizes=n_dec,
                process="Worker_TP0",
            ):
                msgs.append(m_._replace(delay_s=m_.delay_s + 2.0))
            eng.captured_keys.update(sizes)
        # vLLM captures its graphs inside "warmup model", so this line comes after them;
        # log followers use it as the end of warm-up.
        msgs.append(
            L.LogMessage(
                "INFO",
                "core.py",
                250,
                "init engine (profile, create kv cache, warmup model) took 63.41 s",
                delay_s=max(m_.delay_s for m_ in msgs) + 0.2,
            )
        )
        last = max(m_.delay_s for m_ in msgs)
        msgs.append(
            L.LogMessage(
                "INFO",
                "launcher.py",
                46,
                "Starting vLLM API server 0 on http://0.0.0.0:8000",
                "APIServer",
                delay_s=last + 0.5,
            )
        )
        eng._emit(t, msgs)

    def retracted(self, eng: Engine, t: float, n: int) -> None:
        """vLLM V1 logs no line per preemption (the stats line counts them)."""

    def stats(self, eng: Engine, t: float, hit: float | None) -> None:
        sched = eng.sched
        iv = eng.cfg.stats_interval_s
        eng._emit(
            t,
            [
                L.stats_message(
                    eng._stats_prompt / iv,
                    eng._stats_gen / iv,
                    len(sched.running),
                    sched.num_waiting,
                    sched.kv_usage,
                    hit,
                    eng._stats_preempt,
                    v0=self.v0,
                )
            ],
        )


@dataclass(frozen=True, slots=True)
class SglangLogs:
    """SGLang's ``[YYYY-MM-DD HH:MM:SS TP0] message`` records (engine-metrics.md §2.5)."""

    def emit(self, eng: Engine, t: float, messages: list[L.LogMessage]) -> None:
        ts = eng._ts(t)
        for msg in messages:
            if msg.level is not None:
                eng.log.write_line(L.sglang_line(ts, msg.message))

    def startup(
        self,
        eng: Engine,
        t: float,
        cfg: EngineConfig,
        took: float,
        total_blocks: int,
        reason: str | None,
    ) -> None:
        """SGLang's start-up summary, capture and ready lines (engine-metrics.md §2.5)."""
        graph_gib = took
        mem = eng.gpu.mem
        tokens = eng.sched.total_blocks * cfg.block_size
        avail = (mem.total - mem.non_torch - mem.weights) / GiB
        after_kv = avail - mem.kv_pool / GiB - mem.activation_reserved / GiB
        lines = []
        sizes = [s for s in cfg.capture_sizes if s <= cfg.max_num_seqs]
        if sizes:
            lines += [
                "Capture target decode CUDA graph begin. backend=flashinfer, "
                f"num_tokens_per_req=1, avail mem={after_kv:.2f} GB",
                f"Capture target decode CUDA graph end. bs={sizes}, elapsed=4.21 s, "
                f"mem usage={graph_gib:.2f} GB, avail mem={after_kv - graph_gib:.2f} GB.",
            ]
        lines += [
            f"max_total_num_tokens={tokens}, chunked_prefill_size="
            f"{cfg.max_num_batched_tokens if cfg.enable_chunked_prefill else -1}, "
            f"max_prefill_tokens={cfg.max_num_batched_tokens}, "
            f"max_running_requests={cfg.max_num_seqs}, context_len={cfg.max_model_len}, "
            f"available_gpu_mem={after_kv - graph_gib:.2f} GB",
            "The server is fired up and ready to roll!",
        ]
        ts = eng._ts(t)
        for line in lines:
            eng.log.write_line(L.sglang_line(ts, line))

    def retracted(self, eng: Engine, t: float, n: int) -> None:
        eng.log.write_line(L.sglang_line(eng._ts(t), L.sglang_retract_message(n, n * 16, 0.7, 1.0)))

    def stats(self, eng: Engine, t: float, hit: float | None) -> None:
        sched = eng.sched
        iv = eng.cfg.stats_interval_s
        line = (
            f"Decode batch, #running-req: {len(sched.running)}, "
            f"#token: {sched.used_blocks * eng.cfg.block_size}, "
            f"token usage: {sched.kv_usage:.2f}, cuda graph: {eng.last_step_graph}, "
            f"gen throughput (token/s): {eng._stats_gen / iv:.2f}, "
            f"#queue-req: {sched.num_waiting}"
        )
        eng.log.write_line(L.sglang_line(eng._ts(t), line))
        eng.recent_lines.append((t, L.sglang_line(eng._ts(t), line)))


@dataclass(frozen=True)
class Flavour:
    """One simulated engine: everything the simulator does differently for it."""

    name: str  # the --format value, and "format" on the HTTP index
    prefix: str  # its metric names' prefix ("vllm", "sglang")
    version: str  # what GET /version answers
    render: Callable[[Any, str], str]  # (engine, engine label) -> /metrics body
    logs: LogStyle
    # Default bounds of the latency histograms whose layout differs between engines
    # (ttft, itl, e2e, queue_time); --custom-histogram-buckets still overrides them.
    buckets: Mapping[str, Sequence[float]] = field(default_factory=dict)
    # (engine, port) -> JSON of GET /server_info (alias /get_server_info); None answers 404.
    server_info: Callable[[Any, int], dict[str, Any]] | None = None
    # vLLM V1 observes ``iteration_tokens_total`` per batch of outputs as the prompt tokens
    # computed for requests whose first token came out plus the tokens generated (0.32
    # loggers.py): a prompt counts whole at its first token, not per chunk a step carried.
    step_tokens_at_first_token: bool = False


_VLLM_BUCKETS = MappingProxyType(
    {
        "ttft": B.VLLM_TTFT,
        "itl": B.VLLM_ITL,
        "e2e": B.VLLM_REQUEST_LATENCY,
        "queue_time": B.VLLM_REQUEST_LATENCY,
    }
)
FLAVOURS: tuple[Flavour, ...] = (
    Flavour(
        "vllm-v1",
        "vllm",
        "0.33.0",
        vllm.render_v1,
        VllmLogs(),
        _VLLM_BUCKETS,
        step_tokens_at_first_token=True,
    ),
    Flavour("vllm-v0", "vllm", "0.33.0", vllm.render_v0, VllmLogs(v0=True), _VLLM_BUCKETS),
    Flavour(
        "sglang",
        "sglang",
        sglang.SGLANG_VERSION,
        sglang.render,
        SglangLogs(),
        MappingProxyType(
            {
                "ttft": B.SGLANG_TTFT,
                "itl": B.SGLANG_ITL,
                "e2e": B.SGLANG_E2E,
                "queue_time": B.SGLANG_QUEUE_TIME,
            }
        ),
        server_info=sglang.server_info,
    ),
)
_BY_NAME = {f.name: f for f in FLAVOURS}


def names() -> tuple[str, ...]:
    """Every --format value, in registry order."""
    return tuple(_BY_NAME)


def get(name: str) -> Flavour:
    """The entry for ``name``; an unknown format is a ``ValueError`` naming the known ones."""
    found = _BY_NAME.get(name)
    if found is None:
        known = names()
        raise ValueError(f"format must be {', '.join(known[:-1])} or {known[-1]}")
    return found
