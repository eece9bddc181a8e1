"""The simulator twin of a measured engine (realengine.twin): no real engine needed.

The twin is what bench/enginesim_vs_vllm.py holds up against the real vLLM, so what it
must get right is that it *is* the measured engine's arithmetic (its KV capacity, its step
costs, its seats) receiving exactly the plan the real engine received, read through the
product's parser, and that a figure the run did not produce stays unknown."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.plan import PlannedRequest, poisson_plan
from realengine.sizing import EngineCosts, Shape, capacity, kv_concurrency
from realengine.twin import (
    Figures,
    ReplayArrivals,
    differences,
    figures,
    run_twin,
    twin_constants,
    twin_drained,
    twin_engine,
    twin_signals,
)

COSTS = EngineCosts(
    prefill_ms_per_token=0.05,
    decode_step_ms=15.0,
    decode_step_ms_per_seq=0.5,
    kv_tokens=12288,
    block_size=128,
    max_model_len=1024,
    request_ms=5.0,
)


def _plan(n: int, *, every_s: float, prompt: int, output: int) -> list[PlannedRequest]:
    return [PlannedRequest(i, i * every_s, prompt, output) for i in range(n)]


def _run(costs: EngineCosts, plan: list[PlannedRequest], seats: int = 128):
    engine = twin_engine(costs, plan, max_num_seqs=seats, max_num_batched_tokens=2048)
    samples = run_twin(engine, until_s=3600, sample_s=2, drained=twin_drained)
    return engine, figures([s for _, s in samples])


def test_the_twin_reports_the_measured_engines_kv_and_costs():
    engine = twin_engine(COSTS, [], max_num_seqs=128, max_num_batched_tokens=2048)
    signals = twin_signals(engine)
    assert signals.flavour == "vllm-v1"
    assert signals.gauges["kv_capacity_tokens"].value == COSTS.kv_tokens
    assert signals.gauges["kv_block_size"].value == COSTS.block_size
    c = twin_constants(COSTS)
    assert c.prefill_cost_per_token_s == pytest.approx(COSTS.prefill_ms_per_token / 1e3)
    assert c.decode_step_s == pytest.approx(COSTS.decode_step_ms / 1e3)
    assert c.kv_capacity_tokens == COSTS.kv_tokens


def test_replay_hands_over_every_planned_request_once_in_order():
    plan = [PlannedRequest(2, 1.0, 30, 5), PlannedRequest(1, 0.5, 20, 4, priority=1)]
    replay = ReplayArrivals(plan)
    first = replay.pop()
    second = replay.pop()
    assert (first.arrival_s, first.prompt_len, first.max_tokens, first.priority) == (
        0.5, 20, 4, True,
    )  # fmt: skip
    assert (second.arrival_s, second.prompt_len, second.output_len) == (1.0, 30, 5)
    assert replay.peek() is None and len(replay) == 0
    with pytest.raises(IndexError):
        replay.pop()


def test_every_request_is_served_and_every_token_generated():
    plan = _plan(40, every_s=0.5, prompt=200, output=50)
    _, fig = _run(COSTS, plan)
    assert fig.finished == len(plan)
    assert fig.generation_tokens == sum(r.max_tokens for r in plan)
    assert fig.ttft_mean_s is not None and fig.ttft_mean_s > 0


def test_preemptions_come_from_the_kv_capacity_not_from_the_seats():
    """The same burst on the same seats: the twin preempts when the measured KV cannot hold
    the requests it admitted, and not when the KV holds them all."""
    shape = Shape((300, 300), (600, 600))
    fits = kv_concurrency(COSTS, shape)
    burst = _plan(4 * fits, every_s=0.01, prompt=300, output=600)
    _, tight = _run(COSTS, burst)
    roomy = dataclasses.replace(COSTS, kv_tokens=COSTS.kv_tokens * 8)
    _, loose = _run(roomy, burst)
    assert tight.preemptions and tight.preemptions > 0
    assert tight.kv_usage_peak is not None and tight.kv_usage_peak > 0.9
    assert loose.preemptions == 0
    assert tight.finished == loose.finished == len(burst)


def test_the_seats_cap_what_runs_at_once():
    plan = _plan(60, every_s=0.01, prompt=50, output=200)
    _, fig = _run(COSTS, plan, seats=8)
    assert fig.running_peak == 8
    assert fig.waiting_peak is not None and fig.waiting_peak > 0


def test_a_run_with_no_requests_knows_no_latency():
    """Absence is not zero: no first token observed means no TTFT, not a TTFT of 0 s."""
    _, fig = _run(COSTS, [])
    assert fig.ttft_mean_s is None and fig.ttft_p95_s is None and fig.itl_p95_s is None
    assert fig.finished == 0


def test_a_poisson_plan_at_the_measured_capacity_drains():
    """Sized at half the capacity the sizing computes from the same costs, the twin serves
    the load without a standing queue: its arithmetic and the sizing's agree."""
    shape = Shape((100, 300), (50, 150))
    cap = capacity(COSTS, shape, 128)
    prompt, output = shape.mixes()
    plan = poisson_plan(0.5 * cap.requests_per_s, prompt=prompt, output=output, seed=4,
                        duration_s=60)  # fmt: skip
    engine, fig = _run(COSTS, plan)
    assert fig.finished == len(plan) and fig.preemptions == 0
    assert engine.t < 60 + 30  # drained within a few service times of the last arrival


def test_differences_pair_every_figure_and_leave_unknown_ratios_unknown():
    real = Figures(*[1.0] * len(dataclasses.fields(Figures)))
    twin = dataclasses.replace(real, ttft_mean_s=2.0, itl_p95_s=None, preemptions=3.0)
    zero = dataclasses.replace(real, preemptions=0.0)
    rows = {d.figure: d for d in differences(zero, twin)}
    assert set(rows) == {f.name for f in dataclasses.fields(Figures)}
    assert rows["ttft_mean_s"].ratio == 2.0
    assert rows["itl_p95_s"].ratio is None
    assert rows["preemptions"].ratio is None  # zero real preemptions: no ratio to speak of
