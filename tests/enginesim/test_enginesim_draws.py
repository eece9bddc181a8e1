"""Randomised incidents (enginesim.draws): deterministic per seed, valid deployments whose
registered budget the product accepts, and the accuracy bench runs end to end."""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import fields, replace

import pytest

from enginesim import draws
from enginesim.config import EngineConfig
from enginesim.deployment import SimClock
from enginesim.exposition import vllm
from tests.enginesim.conftest import ROOT

ALL = [*draws.SINGLES, *draws.PAIRS]
BUDGET_FIELDS = {
    "weights_gb", "tp_size", "gpu_memory_gib_per_rank", "kv_budget_gib_per_rank",
    "kv_bytes_per_token", "prefill_ms_per_token", "decode_step_ms", "max_num_batched_tokens",
    "max_num_seqs", "ttft_target_ms", "itl_ceiling_ms", "queue_baseline_low",
    "queue_baseline_high", "sm_clock_mhz",
}  # fmt: skip


@pytest.mark.parametrize("scenario", ALL)
def test_a_draw_is_a_function_of_scenario_and_seed(scenario):
    assert draws.draw(scenario, 7) == draws.draw(scenario, 7)
    assert draws.draw(scenario, 7).describe() == draws.draw(scenario, 7).describe()


def test_seeds_draw_different_deployments():
    seen = {(d.model, d.gpu, d.constants.tp_size, d.fmt, d.layout) for d in _many("healthy", 40)}
    assert len(seen) > 20
    assert {d.constants.tp_size for d in _many("healthy", 40)} >= {1, 2, 4, 8}


def test_the_same_seed_simulates_the_same_bytes():
    def body(seed: int) -> bytes:
        sim = draws.draw("kv-pressure", seed).deployment(SimClock("manual"))
        sim.advance(45)
        return vllm.render_v1(sim.engines[0], "0").encode()

    assert body(3) == body(3)
    assert body(3) != body(4)


@pytest.mark.parametrize("scenario", ALL)
def test_draws_are_valid_deployments(scenario):
    for seed in range(6):
        d = draws.draw(scenario, seed)
        c = d.constants
        assert c.weights_bytes_per_rank + c.kv_budget_bytes_per_rank < c.device_total_bytes
        assert c.kv_capacity_tokens > 0 and c.decode_step_s > 0 and c.prefill_cost_per_token_s > 0
        cfg = d.sim.engine_config()
        assert isinstance(cfg, EngineConfig)  # validated by its own __post_init__
        assert set(d.budget) == BUDGET_FIELDS
        assert d.budget["tp_size"] == c.tp_size
        assert d.budget["itl_ceiling_ms"] > 0 and d.budget["ttft_target_ms"] > 0
        assert set(d.causes) == {k for p in scenario.split("+") for k in _causes_of(p)}
        assert d.sources and set(d.sources) <= set(draws.SOURCES)
        if "tp-straggler" in scenario:
            assert c.tp_size >= 2 and d.sim.straggler
        # The simulator starts on it and runs steps (a memory incident may OOM early).
        sim = d.deployment(SimClock("manual"))
        sim.advance(20)
        assert sim.engines[0].step_idx > 0


def test_the_budget_is_accepted_by_the_product():
    pytest.importorskip("django")
    from deployments.budget import Budget

    names = {f.name for f in fields(Budget)}
    for scenario in ALL:
        budget = draws.draw(scenario, 1).budget
        assert set(budget) <= names
        Budget(**budget)


def test_unknown_scenarios_are_refused():
    with pytest.raises(KeyError):
        draws.draw("no-such-incident", 0)
    with pytest.raises(KeyError):
        draws.draw("healthy+gc-pauses+tp-straggler", 0)


def test_the_bench_runs_end_to_end_quickly(tmp_path):
    out = tmp_path / "records.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "diagnosis_accuracy.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "== calibration draws ==" in done.stdout and "== held-out draws ==" in done.stdout
    assert "ERROR" not in done.stdout, done.stdout[-3000:]
    assert out.stat().st_size > 0


def _causes_of(part: str) -> tuple[str, ...]:
    return ("prefill-slow",) if part == "prefill-slow" else draws.scenarios.get(part).causes


def _many(scenario: str, n: int) -> list[draws.Draw]:
    return [draws.draw(scenario, seed) for seed in range(n)]


# --- incidents as they happen, not as the generator first drew them -------------------


def test_gc_pauses_stay_within_what_an_engine_heap_takes():
    lo, hi = draws.GC_PAUSE_RANGE_S
    pauses = [draws.draw("gc-pauses", seed).notes["gc_pause_s"] for seed in range(40)]
    assert all(lo <= p <= hi for p in pauses)
    assert max(pauses) > 2 * min(pauses)  # still a range, not one value


def test_the_ttft_target_covers_the_teams_own_prompts():
    """kv-pressure serves prompts of thousands of tokens: the team's target is at least
    three times what one such prompt takes, so the alarm waits for the KV cache to fill."""
    for seed in range(6):
        d = draws.draw("kv-pressure", seed)
        b = d.budget
        chunk, prompt = b["max_num_batched_tokens"], d.notes["kv_prompt"]
        c = d.constants
        mixed = c.decode_step_s + chunk * c.prefill_cost_per_token_s
        assert b["ttft_target_ms"] / 1000 >= 3 * -(-prompt // chunk) * mixed * 0.999


def test_a_leaks_ttft_target_holds_at_its_healthy_peak():
    for seed in (0, 3):
        d = draws.draw("kv-block-leak", seed)
        peak = d.notes["healthy_peak_ttft_p95_s"]
        assert peak > 0
        assert d.budget["ttft_target_ms"] / 1000 >= 1.25 * peak


def test_a_pairs_leak_alarm_waits_for_the_leak_not_the_partners_peak():
    """gc-pauses+kv-block-leak: the TTFT target was set above the leak-free peak of the
    leak's deployment *without* the pauses, so the pauses at the daily peak raised the
    alarm at 150 s while the leak held 8 % of the cache (and its elimination then counted
    as a true cause eliminated). Set above the pair's peak with only the leak taken out,
    the alarm does not fire in the first period without the leak."""
    d = draws.draw("gc-pauses+kv-block-leak", 10)
    no_leak = replace(d, sim=replace(d.sim, config={**d.sim.config, "kv_leak_fraction": 0.0}))
    sim = no_leak.deployment(SimClock("manual"))
    watch = draws.SymptomWatch(no_leak)
    shown: set[str] = set()
    while sim.now() < 300:
        sim.advance(draws.WATCH_EVERY_S)
        shown |= watch.tick(sim)
    assert "itl-spikes" in shown  # the pauses still show, as their own symptom
    assert "high-ttft" not in shown


@pytest.mark.parametrize("scenario", ["kv-pressure", "kv-pressure+tp-straggler"])
def test_kv_pressures_alarm_waits_for_the_cache_to_hold_a_request_back(scenario):
    """Long prompts sharing the prefill lane on the ramp crossed the TTFT target at a KV
    usage of 0.4 with no queue (kv-pressure seed 6: 4.9 s against 1.3 s), and the draw was
    opened as KV pressure a minute before there was any. The target holds for the team's
    own traffic until the cache first holds a request back (a KV stall or a preemption)."""
    for seed in (6, 0, 1):
        d = draws.draw(scenario, seed)
        sim = d.deployment(SimClock("manual"))
        engine = sim.engines[0]
        watch = draws.SymptomWatch(d)
        while sim.now() < d.deadline_s:
            sim.advance(draws.WATCH_EVERY_S)
            if engine.sched.kv_stalls or engine.metrics.num_preemptions:
                break
            assert "high-ttft" not in watch.tick(sim), (seed, sim.now())
        assert engine.sched.kv_stalls or engine.metrics.num_preemptions, seed  # it did fill


def test_kv_pressure_fills_the_cache_before_the_prefill_lane_saturates():
    """The seats turn over at most 0.6 of what chunked prefill can serve (else the queue
    grows at a half-empty cache), and the ramp's peak is just over what the seats serve."""
    for seed in range(8):
        notes = draws.draw("kv-pressure", seed).notes
        assert notes["kv_peak_rate"] <= 1.35 * 0.6 * notes["kv_lane_rate"] * 1.0001 or (
            notes["kv_prompt"] <= 0.2 * (notes["kv_prompt"] + notes["kv_output"]) * 1.05
        )


def test_kv_pressure_seats_hold_about_the_whole_cache_on_average():
    """vLLM preempts only when a running request finds no free block: the full seats'
    average context (prompt and half the output) is 0.95-1.15 of the capacity, however
    the split between prompt and output moved, so the cache fills before the seats do
    (at 0.7-0.85 the queue that raised TTFT was a seat-limited backlog, KV at 0.5-0.8)."""
    for seed in range(12):
        d = draws.draw("kv-pressure", seed)
        n = d.notes
        held = n["seats"] * (n["kv_prompt"] + n["kv_output"] / 2)
        # The capacity the scaling saw, before the final pool was re-derived from the
        # incident's settings (within a few per cent of it).
        assert 0.9 <= held / n["kv_capacity_tokens"] <= 1.25, (seed, held / n["kv_capacity_tokens"])


def test_prefill_slow_keeps_the_kv_cache_healthy():
    """Slow prefill is drawn with KV healthy: the requests in flight (arrivals x how long
    each holds its blocks) hold at most a quarter of the cache, where prompts of tens of
    thousands of tokens on a small cache (seed 27: 0.46 of it each) filled it and
    preempted, KV pressure beside the slow prefill."""
    for seed in (27, 30, *range(6)):
        notes = draws.draw("prefill-slow", seed).notes
        assert notes["prefill_kv_in_flight"] <= 0.25 * 1.0001


def test_arrivals_stay_within_what_the_prefill_lane_admits():
    """A step admits at most the chunk budget less one token per running decode, and
    never takes less than the decode floor: at a 512-token chunk beside ~100 decodes a
    14B model on an H200 admits ~400 prompt tokens a 25 ms step. "Healthy" arrivals at 0.6
    of the GPU's FLOPs were 1.3x that lane (seed 54: TTFT 7 s against a 0.5 s target) and
    confirmed a capacity backlog on a deployment drawn as healthy."""
    d = draws.draw("healthy", 54)
    x = draws._Ctx(random.Random(0), d.constants, 256, 512, 0.6)
    prompt, output = 770.0, 216.0
    rate = x.rate_for(prompt, output)
    decoding = rate * output * x.step_s  # Little's law: one token a step each
    admitted = (512 - decoding) / x.mixed_step_s()  # prompt tokens a second the lane takes
    assert rate * prompt <= 0.6 * admitted * 1.0001
    # Where the lane does not bind (a big chunk), the FLOPs' share stands as before.
    wide = draws._Ctx(random.Random(0), d.constants, 16, 8192, 0.3)
    capacity = wide.c.kv_budget_bytes_per_rank // wide.c.kv_bytes_per_token
    seats = min(16, capacity / (prompt + output / 2))
    per_request = prompt * wide.c.prefill_cost_per_token_s + output * wide.step_s / seats
    assert wide.rate_for(prompt, output) == pytest.approx(0.3 / per_request)


def test_a_healthy_draw_meets_its_ttft_target():
    """The draw that breached its target by 15x with the lane overloaded (seed 54) stays
    under it over the watch's first two minutes."""
    d = draws.draw("healthy", 54)
    sim = d.deployment(SimClock("manual"))
    watch = draws.SymptomWatch(d)
    while sim.now() < 120.0:
        sim.advance(draws.WATCH_EVERY_S)
        assert "high-ttft" not in watch.tick(sim), sim.now()


@pytest.mark.parametrize("scenario", ["healthy", "gc-pauses", "tp-straggler", "kv-block-leak"])
def test_the_engine_runs_the_chunk_budget_the_team_registers(scenario):
    """A chunk budget is a setting the team typed, not a constant they measured: the
    engine runs it unless the incident is the engine's own chunk (seed 26 registered 2,048
    and ran the simulator's default 512, its lane at 0.8)."""
    for seed in range(4):
        d = draws.draw(scenario, seed)
        assert d.sim.engine_config().max_num_batched_tokens == d.budget["max_num_batched_tokens"]
    oversized = draws.draw("long-prefill-itl", 0)
    engine = oversized.sim.engine_config().max_num_batched_tokens
    assert engine == oversized.notes["engine_chunk"] > oversized.budget["max_num_batched_tokens"]
