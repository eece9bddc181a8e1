"""Profiler artifacts on request, from the engine's ring buffers (via enginesim.artifacts)."""

from __future__ import annotations

from typing import Any

from enginesim.artifacts.chrome_trace import write_chrome_trace
from enginesim.artifacts.gc_log import render_gc_log
from enginesim.artifacts.memory_snapshot import dump_memory_snapshot
from enginesim.artifacts.records import GcPause, GraphCapture, RankMemory, StepRecord

GC_LOG_MAX_PAUSES = 2000


def step_records(engine: Any, start: int, count: int) -> list[StepRecord]:
    """StepRecords with index in [start, start + count) still held in the ring buffer."""
    out = []
    lo, hi = start, start + count
    for s, t, dur, chunks, n_dec, ctx, slow, pause, graph in engine.steps:
        if lo <= s < hi:
            out.append(StepRecord(s, t, dur, chunks, n_dec, ctx, slow, pause, graph))
    return out


def chrome_trace(engine: Any, records: list[StepRecord], *, gzip: bool = False) -> bytes:
    c = engine.c
    return write_chrome_trace(
        records,
        gzip=gzip,
        tp_size=c.tp_size,
        cost_per_prefill_token_s=c.prefill_cost_per_token_s,
        decode_step_s=c.decode_step_s,
        pid=engine.pids.get("Worker_TP0", 0),
        epoch_unix=engine.epoch_unix,
    )


def rank_memory(engine: Any, rank: int) -> RankMemory:
    m = engine.gpu.mem
    return RankMemory(
        device=rank,
        total_bytes=m.total,
        weights_bytes=m.weights,
        kv_pool_bytes=m.kv_pool,
        activation_peak_bytes=m.activation_reserved,
        graph_captures=tuple(
            GraphCapture(p.time_s, p.num_tokens, p.pool_bytes, p.after_warmup)
            for p in m.graph_pools
        ),
        leaked_bytes=tuple(m.leaked_series),
        oom_at_s=m.oom_at_s,
        now_s=engine.t,
    )


def memory_snapshot(engine: Any, rank: int) -> bytes:
    """`_dump_snapshot` pickle of one rank of the *current* engine process."""
    start = engine.metrics.created_unix - engine.epoch_unix
    return dump_memory_snapshot(
        rank_memory(engine, rank),
        epoch_unix=engine.epoch_unix,
        non_torch_bytes=engine.c.non_torch_bytes,
        startup_s=start,
    )


def gc_log(engine: Any) -> str:
    pauses = list(engine.gc_pauses)[-GC_LOG_MAX_PAUSES:]
    first = pauses[0][0] if pauses else 0.0
    # The engine's own timestamped lines around the pauses: the only clock a gc log has.
    around = [(t, line) for t, line in engine.recent_lines if t >= first - 10.0]
    return render_gc_log(
        [GcPause(*p) for p in pauses],
        prefix=f"(EngineCore_DP0 pid={engine.pids['EngineCore_DP0']}) ",
        interleave_with=around,
    )
