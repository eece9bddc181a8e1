"""Evaluation against the playbook's own incidents, built as observation series."""

from __future__ import annotations

import pytest

from deployments.budget import Budget
from investigations.evaluation import evaluate, reduce
from investigations.playbook import Measure, playbooks

NOW = 10_000.0
ATLAS = Budget()


def flat(value: float, *, every: float = 15.0, span: float = 600.0):
    return [(NOW - span + every * i, value) for i in range(1, int(span / every) + 1)]


def walkthrough_1(overrides: dict | None = None) -> dict:
    """Monday-morning ramp: KV 94 %, preemptions climbing, queue 47, router fast."""
    obs = {
        ("engine", "ttft_p95"): [("", flat(1.4))],
        ("engine", "requests_waiting"): [("", flat(47))],
        ("engine", "requests_running"): [("", flat(40))],
        ("engine", "kv_cache_usage"): [("", flat(0.94))],
        ("engine", "preemptions_rate"): [("", flat(23 / 300))],
        ("engine", "prompt_tokens_rate"): [("", flat(2000 * 1.5))],
        ("engine", "e2e_count_rate"): [("", flat(1.5))],
        # ~1,100 tokens out per request: what the running requests hold (kv-held-by-running)
        ("engine", "generation_tokens_rate"): [("", flat(1.5 * 1100))],
        ("engine", "prefill_time_mean"): [("", flat(0.20))],
        ("engine", "queue_time_p95"): [("", flat(1.1))],
        ("prometheus", "router_forward_p95"): [("", flat(0.008))],
    }
    obs.update(overrides or {})
    return obs


def test_walkthrough_1_ranks_kv_pressure_first_and_eliminates_the_decoys():
    result = evaluate(playbooks()["high-ttft"], ATLAS, walkthrough_1(), NOW)
    assert result.alarm.firing and result.alarm.threshold == pytest.approx(0.6)
    assert result.ranking[0] == "kv-cache-pressure"
    assert result.find("kv-cache-pressure").suggestion == "confirm"
    assert result.find("router-latency").suggestion == "eliminate"
    assert result.find("prefill-slow").suggestion == "eliminate"
    check = result.find("router-latency").checks[0]
    assert (check.measured, check.eliminate_threshold, check.reason) == (
        0.008,
        0.02,
        "0.008 < 0.02",
    )


def test_the_prefill_expectation_is_the_budget_arithmetic():
    result = evaluate(playbooks()["high-ttft"], ATLAS, walkthrough_1(), NOW)
    # 2,000-token prompts: four 512-token steps of at most 45 + 17.92 ms.
    assert result.expected["expected.avg_prompt_tokens"] == pytest.approx(2000)
    assert result.expected["expected.prefill_s"] == pytest.approx(4 * 0.06292)


def test_the_fix_parameter_comes_from_the_observed_context_and_the_budget():
    result = evaluate(playbooks()["high-ttft"], ATLAS, walkthrough_1(), NOW)
    fix = result.find("kv-cache-pressure").fix
    # avg context = 0.94 x 114,688 / 40 = 2,695 tokens; 0.7 of the cache on today's average
    # leaves room for sequences to grow while they decode: 29 seats (the seed chose 28).
    assert fix.parameters["max_num_seqs"] == 29
    assert fix.apply == {"max_num_seqs": 29}
    assert "--max-num-seqs 29" in fix.command


def test_missing_data_is_inconclusive_never_eliminated():
    observations = walkthrough_1()
    del observations[("prometheus", "router_forward_p95")]
    del observations[("engine", "prompt_tokens_rate")]  # no expected prefill time
    result = evaluate(playbooks()["high-ttft"], ATLAS, observations, NOW)
    router = result.find("router-latency")
    assert router.suggestion == "inconclusive"
    assert router.checks[0].reason == "no data in the window"
    prefill = result.find("prefill-slow")
    assert prefill.checks[0].outcome == "inconclusive"
    assert "expected.prefill_wall_s" in prefill.checks[0].reason
    # The preemptions that muddy the prefill time (evicted requests re-prefill) hold a
    # confirmation back; they are no evidence against slow kernels, so nothing is ruled out.
    assert prefill.checks[1].outcome == "inconclusive" and prefill.checks[1].in_doubt
    assert prefill.suggestion == "inconclusive"
    assert result.ranking[0] == "kv-cache-pressure"


def test_decisions_are_never_overridden_by_evaluation():
    result = evaluate(
        playbooks()["high-ttft"], ATLAS, walkthrough_1(), NOW,
        decisions={"kv-cache-pressure": "eliminated"},
    )  # fmt: skip
    node = result.find("kv-cache-pressure")
    assert node.state == "eliminated" and node.score == 0.0
    assert node.suggestion == "confirm"  # the evidence still says so; people decided
    assert result.ranking[-1] == "kv-cache-pressure"


def test_a_slow_router_ranks_first_when_the_engines_are_healthy():
    healthy = walkthrough_1(
        {
            ("engine", "requests_waiting"): [("", flat(4))],
            ("engine", "kv_cache_usage"): [("", flat(0.5))],
            ("engine", "preemptions_rate"): [("", flat(0.0))],
            ("prometheus", "router_forward_p95"): [("", flat(0.4))],
        }
    )
    result = evaluate(playbooks()["high-ttft"], ATLAS, healthy, NOW)
    assert result.ranking[0] == "router-latency"
    assert result.find("engine-queue").suggestion == "eliminate"


def _walkthrough_3(tokens_p99: float) -> dict:
    """Walkthrough 3's spikes: p99 ITL 310 ms over a healthy 48 ms median, four loaded GPUs
    at full clock, ``tokens_p99`` tokens a step at p99."""
    return {
        ("engine", "itl_p99"): [("", flat(0.31))],
        ("engine", "itl_p50"): [("", flat(0.048))],
        ("engine", "iteration_tokens_p99"): [("", flat(tokens_p99))],
        ("dcgm", "gpu_sm_clock_mhz"): [(f"gpu={g}", flat(1410)) for g in range(4)],
        ("dcgm", "gpu_gpu_util_pct"): [(f"gpu={g}", flat(97)) for g in range(4)],  # under load
    }


def test_walkthrough_3_oversized_chunks_and_the_strict_budget():
    observations = _walkthrough_3(4096 + 40)
    observations[("dcgm", "gpu_clock_events")] = [(f"gpu={g}", flat(0)) for g in range(4)]
    result = evaluate(playbooks()["itl-spikes"], ATLAS, observations, NOW)
    assert result.ranking[0] == "oversized-prefill-chunks"
    assert result.find("tp-straggler").suggestion == "eliminate"  # clocks within 5 %
    assert result.find("gc-pauses").suggestion == "inconclusive"  # no gc log uploaded
    assert result.find("oversized-prefill-chunks").fix.parameters["max_num_batched_tokens"] == 512


def _v1_long_prompts(engine_budget: float | None, batch_max: float = 8192) -> dict:
    """vLLM V1 serving 8,000-token prompts: it has no per-step histogram; the family V0
    used for one observes each prompt whole at the request's first token (vLLM 0.32
    loggers: computed prompt tokens + generated tokens per batch of outputs), read as
    ``output_batch_tokens``, so its top bucket is 8,192 whatever the chunk budget;
    ``engine_budget`` is the budget its start-up line gave, when the log was followed
    from the start."""
    observations = _walkthrough_3(0)
    del observations[("engine", "iteration_tokens_p99")]
    observations[("engine", "output_batch_tokens_max_hi")] = [("", flat(batch_max))]
    observations[("engine", "output_batch_tokens_p99")] = [("", flat(min(batch_max, 8040)))]
    if engine_budget is not None:
        # Read once, at start-up, an hour before: the check's window is a week.
        observations[("log", "log_chunk_budget_tokens")] = [("", [(NOW - 3600, engine_budget)])]
    return observations


def test_an_engine_chunking_at_the_teams_budget_cannot_carry_oversized_chunks():
    """The engine's own start-up line (512 tokens a step, the team's budget) rules the
    cause out however many tokens V1 counts for a batch of outputs."""
    tree = evaluate(playbooks()["itl-spikes"], ATLAS, _v1_long_prompts(512), NOW)
    chunks = tree.find("oversized-prefill-chunks")
    assert chunks.suggestion == "eliminate"
    assert {c.id: c.outcome for c in chunks.checks}["engine-chunk-budget"] == "eliminate"
    assert tree.ranking[0] != "oversized-prefill-chunks"


def test_an_engine_chunking_beyond_the_teams_budget_with_prompts_that_long_confirms():
    """8,192 tokens a step allowed against the team's 512, and batches of outputs of
    8,000-token prompts: with the engine's budget known, a batch that big is a step that
    big. The cause."""
    tree = evaluate(playbooks()["itl-spikes"], ATLAS, _v1_long_prompts(8192), NOW)
    chunks = tree.find("oversized-prefill-chunks")
    outcomes = {c.id: c.outcome for c in chunks.checks}
    assert outcomes["engine-chunk-budget"] == "inconclusive"  # it only rules out
    assert outcomes["output-batch-p99"] == "confirm"
    assert outcomes["tokens-per-step-p99"] == "inconclusive"  # no V0 histogram: no data
    assert chunks.suggestion == "confirm"
    assert tree.ranking[0] == "oversized-prefill-chunks"


def test_v1s_whole_prompt_count_alone_confirms_nothing():
    """No log read from the start: V1's 8,000 "tokens" are prompts counted whole, which an
    engine chunking at 512 reads too. It was read as tokens per step and confirmed the
    cause; it neither confirms nor rules out (absence of the per-step figure is not
    evidence), and the cause stays ranked on its prior."""
    tree = evaluate(playbooks()["itl-spikes"], ATLAS, _v1_long_prompts(None), NOW)
    chunks = tree.find("oversized-prefill-chunks")
    outcomes = {c.id: c.outcome for c in chunks.checks}
    assert outcomes["engine-chunk-budget"] == "inconclusive"
    assert outcomes["output-batch-max"] == "inconclusive"
    assert chunks.suggestion == "inconclusive"


def test_v1_batches_of_outputs_within_the_budget_rule_oversized_steps_out():
    """An upper bound: a step's prompt tokens are counted, whole, in the batch where the
    prompt's first token comes out. If no batch's top bucket passes 1.1x the budget (512
    against 563), no step carried an oversized chunk; one bucket up (1,024) says nothing."""
    tree = evaluate(playbooks()["itl-spikes"], ATLAS, _v1_long_prompts(None, 512), NOW)
    chunks = tree.find("oversized-prefill-chunks")
    assert {c.id: c.outcome for c in chunks.checks}["output-batch-max"] == "eliminate"
    assert chunks.suggestion == "eliminate"
    wider = evaluate(playbooks()["itl-spikes"], ATLAS, _v1_long_prompts(None, 1024), NOW)
    assert wider.find("oversized-prefill-chunks").suggestion == "inconclusive"


def test_a_throttled_rank_is_a_straggler():
    clocks = [(f"gpu={g}", flat(1410)) for g in range(3)] + [("gpu=3", flat(1200))]
    measure = Measure("gpu_sm_clock_mhz", "dcgm", "spread", 300)
    assert reduce(measure, {("dcgm", "gpu_sm_clock_mhz"): clocks}, NOW) == pytest.approx(0.175)


def test_points_outside_the_window_do_not_count():
    old = [(NOW - 3600, 0.99)]
    measure = Measure("kv_cache_usage", "engine", "max", 300)
    assert reduce(measure, {("engine", "kv_cache_usage"): [("", old)]}, NOW) is None


def _itl_observations(clocks: list[float], events: list[float] | None = None) -> dict:
    observations = {
        ("engine", "itl_p99"): [("", flat(0.26))],
        ("engine", "itl_p50"): [("", flat(0.055))],
        ("engine", "iteration_tokens_p99"): [("", flat(500))],
        ("dcgm", "gpu_sm_clock_mhz"): [(f"gpu={g}", flat(c)) for g, c in enumerate(clocks)],
        ("dcgm", "gpu_gpu_util_pct"): [(f"gpu={g}", flat(96)) for g in range(len(clocks))],
    }
    if events is not None:
        observations[("dcgm", "gpu_clock_events")] = [
            (f"gpu={g}", flat(e)) for g, e in enumerate(events)
        ]
    return observations


def test_host_wide_throttling_is_found_with_dcgm_exporters_default_fields():
    """The default counters carry SM clocks but no clock-event reasons: every GPU under
    95 % of the full clock confirms throttling, and the optional reasons check, absent,
    neither blocks nor helps it."""
    result = evaluate(playbooks()["itl-spikes"], ATLAS, _itl_observations([1200] * 4), NOW)
    throttling = result.find("gpu-throttling")
    assert throttling.suggestion == "confirm"
    assert [c.outcome for c in throttling.checks] == ["confirm", "inconclusive"]
    assert result.find("tp-straggler").suggestion == "eliminate"  # all equally slow
    assert result.ranking[0] == "gpu-throttling"


def test_one_throttled_rank_is_a_straggler_first_and_throttled_too():
    result = evaluate(
        playbooks()["itl-spikes"], ATLAS, _itl_observations([1410, 1410, 1200, 1410]), NOW
    )
    assert result.find("gpu-throttling").suggestion == "confirm"
    assert result.find("tp-straggler").suggestion == "confirm"
    assert result.ranking[:2] == ("tp-straggler", "gpu-throttling")
    full = evaluate(playbooks()["itl-spikes"], ATLAS, _itl_observations([1410] * 4), NOW)
    assert full.find("gpu-throttling").suggestion == "eliminate"


def test_an_optional_check_with_data_still_counts():
    observations = _itl_observations([1200] * 4, events=[0, 0, 0, 0])
    throttling = evaluate(playbooks()["itl-spikes"], ATLAS, observations, NOW).find(
        "gpu-throttling"
    )
    assert [c.outcome for c in throttling.checks] == ["confirm", "eliminate"]
    assert throttling.suggestion == "inconclusive"  # the evidence disagrees: people decide


def test_kv_held_by_nobody_is_a_leak_not_seat_pressure():
    """A full cache with a dozen short requests running cannot be what they hold: the
    veto check rules out seat pressure (fewer seats would not help) and the leak ranks
    first. With walkthrough 1's 40 long sequences the same usage is fully explained."""
    leak = walkthrough_1(
        {
            ("engine", "requests_running"): [("", flat(12))],
            ("engine", "kv_cache_usage"): [("", flat(0.99))],
            ("engine", "prompt_tokens_rate"): [("", flat(700 * 1.5))],
            ("engine", "generation_tokens_rate"): [("", flat(180 * 1.5))],
        }
    )
    result = evaluate(playbooks()["high-ttft"], ATLAS, leak, NOW)
    # 12 x (700 + 90) tokens of 114,688 is 8 % of the cache.
    assert result.expected["expected.kv_usage_of_running"] == pytest.approx(12 * 790 / 114688)
    assert result.find("kv-cache-pressure").suggestion == "eliminate"
    assert result.find("kv-block-leak").suggestion == "confirm"
    assert result.ranking[0] == "kv-block-leak"

    pressure = walkthrough_1({("engine", "generation_tokens_rate"): [("", flat(700 * 1.5))]})
    result = evaluate(playbooks()["high-ttft"], ATLAS, pressure, NOW)
    assert result.find("kv-block-leak").suggestion == "eliminate"
    assert result.find("kv-cache-pressure").suggestion == "confirm"


def test_a_where_guard_keeps_only_points_taken_while_the_same_series_met_it():
    clock = {"gpu=0": [(NOW - 20, 135.0), (NOW - 10, 1200.0)], "gpu=1": [(NOW - 10, 300.0)]}
    util = {"gpu=0": [(NOW - 20, 0.0), (NOW - 10, 97.0)]}  # gpu 1: load unknown
    observations = {
        ("dcgm", "gpu_sm_clock_mhz"): list(clock.items()),
        ("dcgm", "gpu_gpu_util_pct"): list(util.items()),
    }
    loaded = Measure("gpu_sm_clock_mhz", "dcgm", "min", 300, where=("gpu_gpu_util_pct", ">=", 50))
    assert reduce(loaded, observations, NOW) == 1200.0  # idle 135 and unknown-load 300 left out
    idle = Measure("gpu_sm_clock_mhz", "dcgm", "min", 300, where=("gpu_gpu_util_pct", ">=", 99))
    assert reduce(idle, observations, NOW) is None  # never loaded enough: no data


def test_the_fix_sizes_seats_on_the_context_a_sequence_reaches():
    """Today's average context is a snapshot mid-decode: where prompts and outputs say a
    sequence ends much longer than it holds now, the full batch at that length must stay
    under 0.8 (a real vLLM's fixed engine, sized on the snapshot alone, filled its cache)."""
    # 40 running requests hold 0.5 of the cache (1,433 tokens each) but end at
    # 2,000 + 2,400 tokens: 0.8 x 114,688 / 4,400 = 20.9 seats, not 0.7 x 114,688 / 1,433 = 56.
    long_outputs = walkthrough_1({
        ("engine", "kv_cache_usage"): [("", flat(0.5))],
        ("engine", "generation_tokens_rate"): [("", flat(1.5 * 2400))],
    })  # fmt: skip
    result = evaluate(playbooks()["high-ttft"], ATLAS, long_outputs, NOW)
    assert result.expected["expected.context_reached_tokens"] == pytest.approx(4400)
    assert result.find("kv-cache-pressure").fix.parameters["max_num_seqs"] == 20


def test_without_output_lengths_the_fix_falls_back_to_todays_context():
    """No generation rate: nothing says how long sequences get, so the reached context is
    the current one and the 0.7 rule (room to grow) sizes the seats alone."""
    observations = walkthrough_1()
    del observations[("engine", "generation_tokens_rate")]
    result = evaluate(playbooks()["high-ttft"], ATLAS, observations, NOW)
    expected = result.expected
    assert expected["expected.context_reached_tokens"] == expected["expected.avg_context_tokens"]
    assert result.find("kv-cache-pressure").fix.parameters["max_num_seqs"] == 29


def test_a_restart_whose_budget_line_is_not_read_yet_is_no_evidence():
    """After a restart's banner the log probe records "not known" (-1): the budget logged
    before no longer stands, and nothing stands in for it. A crash-looping simulated engine
    read between banner and budget line confirmed oversized chunks on "no bound"."""
    from probes.observe import CHUNK_BUDGET_UNKNOWN

    tree = evaluate(playbooks()["itl-spikes"], ATLAS, _v1_long_prompts(CHUNK_BUDGET_UNKNOWN), NOW)
    chunks = tree.find("oversized-prefill-chunks")
    budget = next(c for c in chunks.checks if c.id == "engine-chunk-budget")
    assert (budget.outcome, budget.measured) == ("inconclusive", None)
    assert "not known since the engine last started" in budget.reason
    assert chunks.suggestion == "inconclusive"


def test_a_big_engine_budget_with_short_prompts_is_no_evidence_of_big_steps():
    """A 4,096-token engine (team: 512) whose batches of outputs are small at p99 and
    reach 4,096 once (700-token prompts, a rare long one): the budget lets big steps
    through, too few came to move the ITL p99. It confirmed the cause beside a throttled
    rank (a simulated pair)."""
    observations = _v1_long_prompts(4096, 4096)
    observations[("engine", "output_batch_tokens_p99")] = [("", flat(60))]
    tree = evaluate(playbooks()["itl-spikes"], ATLAS, observations, NOW)
    assert tree.find("oversized-prefill-chunks").suggestion == "inconclusive"
