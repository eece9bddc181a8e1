"""Pairs of scenarios realise both incidents at once: traffic keeps what each cause needs,
pairs that would hide each other get their own defaults, a restarted engine's memory
snapshot starts with the new process, and counters count what vLLM V1 counts."""

from __future__ import annotations

import pytest

from artifacts.memory_analysis import analyse_snapshot
from artifacts.memory_snapshot import load_snapshot
from enginesim import scenarios
from enginesim.config import GiB
from enginesim.deployment import Deployment, SimClock

MiB = 1 << 20


def _sim(name: str) -> Deployment:
    return Deployment(name, clock=SimClock("manual"))


def test_pair_defaults_apply_to_the_pair_only_and_explicit_params_win():
    assert scenarios.get("allocator-leak").params["leak_mib_per_s"] == 24
    assert scenarios.get("allocator-leak+kv-pressure").params["leak_mib_per_s"] == 16
    assert scenarios.get("kv-pressure+allocator-leak").params["leak_mib_per_s"] == 16
    assert scenarios.get("allocator-leak+gc-pauses").params["leak_mib_per_s"] == 24
    chosen = scenarios.get("allocator-leak+kv-pressure", {"leak_mib_per_s": 30})
    assert chosen.engine_config().allocator_leak_bytes_per_s == 30 * MiB
    every = {name for pair in scenarios.PAIR_DEFAULTS for name in pair}
    assert every <= set(scenarios.names())
    for pair, params in scenarios.PAIR_DEFAULTS.items():
        known = {k for name in pair for k in scenarios._REGISTRY[name][0]}
        assert len(pair) == 2 and set(params) <= known, (pair, params)


def test_traffic_keeps_the_shape_and_lengths_each_cause_needs():
    # graph-pool-growth's short prompts: mixed batches stay inside the captured sizes.
    wl = scenarios.get("allocator-leak+graph-pool-growth").workload_spec()
    assert wl.prompt.median == 220 and wl.long_prompt_fraction == pytest.approx(0.004)
    # kv-pressure's ramp of long conversations beats kv-block-leak's daily cycle.
    wl = scenarios.get("kv-block-leak+kv-pressure").workload_spec()
    assert wl.rate.max_rate == pytest.approx(1.25) and wl.prompt.median == 2400
    # A shape from one, lengths from the other.
    wl = scenarios.get("graph-pool-growth+kv-block-leak").workload_spec()
    assert wl.rate.period_s == 300 and wl.prompt.median == 220


def test_a_pair_config_pins_the_kv_cache_and_big_unchunked_steps_run_eager():
    sim = _sim("graph-pool-growth+prefill-unchunked")
    engine = sim.engines[0]
    assert engine.gpu.mem.kv_pool == 29 * GiB
    sim.advance(240)
    assert engine.graph_captures_after_warmup >= 1  # the pool-growth defect is active
    # Step records: (index, t, duration, chunks, decodes, context, slowdowns, pause, graph).
    steps = [(sum(c for c, _ in r[3]) + r[4], r[8]) for r in engine.steps]
    big = [graph for tokens, graph in steps if tokens > 4096]
    assert big and not any(big)  # 8-15k-token prompts ran eager, never captured
    late = [p.num_tokens for p in engine.gpu.mem.graph_pools if p.after_warmup]
    assert all(n <= 4096 for n in late)


def test_the_block_leak_fills_the_cache_before_the_graph_pools_fill_the_device():
    """graph-pool-growth+kv-block-leak (seed 0): with the KV cache pinned at 30 GiB four
    on-the-fly pools fit, so the leak fills the cache and the queue builds first; the
    backlog's new batch shapes then OOM the engine, and the restart hands the blocks back
    until the leak grows again (the matrix opens high-ttft at 18 min, gpu-oom at 29)."""
    sim = _sim("graph-pool-growth+kv-block-leak")
    engine = sim.engines[0]
    assert engine.gpu.mem.kv_pool == 30 * GiB
    assert engine.cfg.kv_leak_fraction == pytest.approx(0.15)
    sim.advance(1080)
    sched = engine.sched
    assert engine.ooms == 0 and engine.graph_captures_after_warmup >= 4
    assert sched.kv_usage > 0.95 and sched.num_waiting >= 20
    assert sched.leaked_blocks > 0.8 * sched.total_blocks
    sim.advance(1740 - 1080)
    sched = engine.sched
    assert engine.ooms == 1 and engine.is_up
    assert 0.4 * sched.total_blocks < sched.leaked_blocks < 0.8 * sched.total_blocks


def test_a_restarted_engines_snapshot_holds_the_new_process_and_its_leak():
    """After an OOM restart the allocator history starts with the new process, so the
    leak is most of it (it used to be a sliver of a trace reaching back to t = 0)."""
    sim = _sim("allocator-leak+kv-pressure")
    sim.advance(480)
    engine = sim.engines[0]
    assert engine.restarts == 1 and engine.is_up
    from enginesim import profiling

    analysis = analyse_snapshot(load_snapshot(profiling.memory_snapshot(engine, 0)))
    signals = analysis.as_dict()["signals"]
    assert signals["artifact_trace_span_s"] < 120
    slope = signals["artifact_allocated_slope_bytes_per_s"]
    assert 12 * MiB < slope < 22 * MiB  # the pair's 16 MiB/s


def test_prompt_tokens_count_each_request_once_even_in_a_preemption_storm():
    """vLLM V1 counts a request's prompt when its first token comes out; re-prefill after
    a preemption is not counted again (it used to inflate the average prompt ~5x)."""
    sim = _sim("kv-pressure")
    sim.advance(330)
    m = sim.engines[0].metrics
    assert m.num_preemptions > 50
    assert 2000 < m.prompt_tokens / m.ttft.count < 2900  # ~2,400-token prompts
