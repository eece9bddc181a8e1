"""Evidence knows what it rests on: each rule of issue 16 pinned by a case built for it.

Pure evaluation over observation series as the probes record them: a rate with the span
of scrapes behind it (``scrape_span_s``), a quantile with its bucket (``_lo``/``_hi``), a
histogram's mean with the observations behind it (``_window_count``).
"""

from __future__ import annotations

import pytest

from deployments.budget import Budget
from investigations.evaluation import (
    DEFAULT_MIN_RATE,
    EXPECTED_EVENTS,
    WINDOW_COVERAGE,
    evaluate,
    required_span_s,
)
from investigations.playbook import PlaybookError, parse_playbook, playbooks

NOW = 50_000.0
ATLAS = Budget()
POLL = 5.0


def polled(value: float, times) -> list[tuple[float, float]]:
    return [(t, value) for t in times]


def scrapes(seconds: float) -> list[float]:
    """Scrape times, every 5 s, over the last ``seconds`` (the first is the oldest)."""
    n = int(seconds / POLL)
    return [NOW - POLL * (n - i) for i in range(n + 1)]


def engine_view(seconds: float, values: dict, *, probe_window: float = 60.0) -> dict:
    """What the engine probe records after ``seconds`` of scrapes: gauges on every cycle,
    windowed values (rates, quantiles, means) from the second on, with their span."""
    times = scrapes(seconds)
    derived = times[1:]
    obs: dict = {
        ("engine", "scrape_span_s"): [("", [(t, min(t - times[0], probe_window)) for t in derived])]
    }
    for signal, value in values.items():
        windowed = (
            signal.endswith(("_rate", "_mean", "_lo", "_hi", "_window_count")) or "_p" in signal
        )
        obs[("engine", signal)] = [("", polled(value, derived if windowed else times))]
    return obs


# Walkthrough 1 as a new user sees it: KV 0.95, 40 running, ~46 waiting, preemptions at the
# seed's "23 in five minutes", which a counter need not show in its first seconds.
WALKTHROUGH_1 = {
    "ttft_p95": 1.4,
    "requests_waiting": 46,
    "requests_running": 40,
    "kv_cache_usage": 0.95,
    "prompt_tokens_rate": 2000 * 1.5,
    "e2e_count_rate": 1.5,
    "prefill_time_mean": 0.20,
    "prefill_time_window_count": 40,
    "queue_time_p95": 1.1,
    "queue_time_p95_lo": 1.0,
    "queue_time_p95_hi": 2.5,
}


def high_ttft(observations):
    return evaluate(playbooks()["high-ttft"], ATLAS, observations, NOW)


# --- evidence knows its span ----------------------------------------------------------


def test_a_counter_that_has_not_moved_in_ten_seconds_eliminates_nothing():
    result = high_ttft(engine_view(10, {**WALKTHROUGH_1, "preemptions_rate": 0.0}))
    check = next(c for c in result.find("kv-cache-pressure").checks if c.id == "preemption-rate")
    assert (check.measured, check.outcome, check.held) == (0.0, "inconclusive", "span")
    # Ten seconds of scrapes (the first rate already covered the five before it).
    assert check.span_s == pytest.approx(10.0)
    assert (check.first_at, check.last_at, check.samples) == (NOW - 5, NOW, 2)
    # Three preemptions at one a minute take 180 s: 170 s more.
    assert check.needs_s == pytest.approx(170.0)
    assert check.needs_more == "needs ≥ 170 s more data"
    assert "needs ≥ 170 s more data" in check.reason
    # Full KV with preemptions not yet known: not confirmed, but the most likely cause;
    # the queue's depth backs all of engine-queue's children alike and is counted once.
    assert result.find("kv-cache-pressure").suggestion == "inconclusive"
    assert result.ranking[0] == "kv-cache-pressure"
    assert result.ranking.index("queue-backlog") > 0


def test_five_minutes_without_a_preemption_is_evidence():
    result = high_ttft(engine_view(300, {**WALKTHROUGH_1, "preemptions_rate": 0.0}))
    check = next(c for c in result.find("kv-cache-pressure").checks if c.id == "preemption-rate")
    assert check.outcome == "eliminate" and not check.held
    assert check.span_s == pytest.approx(300.0)  # the window, not more


def test_a_preemption_seen_is_evidence_at_once():
    result = high_ttft(engine_view(10, {**WALKTHROUGH_1, "preemptions_rate": 0.1}))
    pressure = result.find("kv-cache-pressure")
    assert [c.outcome for c in pressure.checks][:2] == ["confirm", "confirm"]
    # The vetoes that a preemption storm triggers do not wait either.
    assert result.find("queue-backlog").suggestion == "eliminate"
    assert result.ranking[0] == "kv-cache-pressure"


def test_the_span_a_rate_needs_follows_the_threshold_and_the_rate_that_matters():
    assert required_span_s(">", 0, None) == 0  # one event proves "more than none"
    assert required_span_s("<=", 0, None) == pytest.approx(EXPECTED_EVENTS / DEFAULT_MIN_RATE)
    assert required_span_s("<=", 0, 0.5) == pytest.approx(6.0)
    assert required_span_s("<", 2.0, None) == pytest.approx(1.5)  # the threshold is the rate
    assert required_span_s(">", 0.25, None) == pytest.approx(12.0)


def _one_check_playbook(check: str) -> str:
    return f"""
schema: 1
key: high-ttft
version: 1
title: t
summary: s
alarm:
  measure: {{source: engine, signal: ttft_p95}}
  when: {{op: ">", value: 1}}
hypotheses:
  - key: kv-cache-pressure
    title: t
    rationale: r
    prior: 0.5
    checks:
      - {check}
"""


def test_a_check_names_the_smallest_rate_that_matters():
    playbook = parse_playbook(
        _one_check_playbook(
            "{id: preemptions, title: p, min_rate: 0.5, measure: {source: engine, signal: "
            'preemptions_rate, reduce: mean}, eliminate: {op: "<=", value: 0}}'
        )
    )
    assert playbook.node("kv-cache-pressure").checks[0].min_rate == 0.5
    view = engine_view(10, {"preemptions_rate": 0.0})
    (check,) = evaluate(playbook, ATLAS, view, NOW).find("kv-cache-pressure").checks
    assert check.outcome == "eliminate"  # 0.5/s would have shown 5 in 10 s


def test_only_a_rate_has_a_smallest_rate_that_matters():
    with pytest.raises(PlaybookError, match="min_rate"):
        parse_playbook(
            _one_check_playbook(
                "{id: preemptions, title: p, min_rate: 0.5, measure: {source: engine, signal: "
                'kv_cache_usage}, eliminate: {op: "<=", value: 0}}'
            )
        )


def test_a_gauge_needs_the_samples_its_reduction_implies():
    healthy_kv = {"kv_cache_usage": 0.5}
    one = high_ttft(engine_view(0, healthy_kv))
    kv = one.find("kv-cache-pressure").checks[0]
    # "The max stayed under 0.8" from one sample is only the last value.
    assert (kv.outcome, kv.held, kv.samples) == ("inconclusive", "samples", 1)
    two = high_ttft(engine_view(5, healthy_kv))
    kv = two.find("kv-cache-pressure").checks[0]
    assert (kv.outcome, kv.held, kv.samples) == ("inconclusive", "span", 2)
    # "The max went over 0.9" is shown by one sample.
    full = high_ttft(engine_view(0, {"kv_cache_usage": 0.95}))
    assert full.find("kv-cache-pressure").checks[0].outcome == "confirm"


def test_a_max_that_stayed_below_needs_a_quarter_of_its_window_seen():
    """The drawn KV-pressure incident opened by its straggler: KV read 0.64, then 0.70 five
    seconds later, filling; "the max over 300 s stayed under 0.8" eliminated the cause
    that a minute later held the cache full. Two samples speak for the seconds between
    them: the claim waits until a quarter of the window was seen (``WINDOW_COVERAGE``)."""
    window = 300
    needed = window * WINDOW_COVERAGE
    filling = engine_view(5, {})
    filling[("engine", "kv_cache_usage")] = [("", [(NOW - 5, 0.64), (NOW, 0.70)])]
    kv = high_ttft(filling).find("kv-cache-pressure").checks[0]
    assert (kv.outcome, kv.held, kv.span_s) == ("inconclusive", "span", 5)
    assert kv.needs_s == needed - 5
    assert kv.needs_more == f"needs ≥ {needed - 5:.0f} s more data"
    assert high_ttft(filling).find("kv-cache-pressure").suggestion != "eliminate"
    seen = high_ttft(engine_view(needed, {"kv_cache_usage": 0.5}))
    kv = seen.find("kv-cache-pressure").checks[0]
    assert (kv.outcome, kv.span_s) == ("eliminate", needed)


def test_a_min_that_stayed_above_needs_a_quarter_of_its_window_seen():
    """The same for "the slowest clock stayed at full" (gpu-throttling's clock deficit)."""

    def clock_deficit(seconds: float):
        obs = engine_view(seconds, {"itl_p99": 0.26})
        obs[("dcgm", "gpu_sm_clock_mhz")] = [("gpu=0", polled(1410, scrapes(seconds)))]
        obs[("dcgm", "gpu_gpu_util_pct")] = [("gpu=0", polled(96, scrapes(seconds)))]
        result = evaluate(playbooks()["itl-spikes"], ATLAS, obs, NOW)
        return next(c for c in result.find("gpu-throttling").checks if c.id == "clock-deficit")

    early = clock_deficit(10)
    assert (early.outcome, early.held) == ("inconclusive", "span")
    assert clock_deficit(300 * WINDOW_COVERAGE).outcome == "eliminate"


# --- quantiles carry their bucket -----------------------------------------------------


def itl_spikes(tokens: dict, clocks=(1410, 1410, 1200, 1410)):
    obs = engine_view(10, {"itl_p99": 0.26, "itl_p50": 0.055, **tokens})
    obs[("dcgm", "gpu_sm_clock_mhz")] = [
        (f"gpu={g}", polled(c, scrapes(10))) for g, c in enumerate(clocks)
    ]
    obs[("dcgm", "gpu_gpu_util_pct")] = [
        (f"gpu={g}", polled(96, scrapes(10))) for g in range(len(clocks))
    ]
    return evaluate(playbooks()["itl-spikes"], ATLAS, obs, NOW)


def test_a_p99_interpolated_inside_a_bucket_that_straddles_the_threshold_is_inconclusive():
    """The issue's throttled rank: tokens per step interpolated at 863 inside 512-1,024
    reads over 768 though no step need have been that large."""
    result = itl_spikes(
        {
            "iteration_tokens_p99": 863,
            "iteration_tokens_p99_lo": 512,
            "iteration_tokens_p99_hi": 1024,
        }
    )
    chunks = result.find("oversized-prefill-chunks")
    check = chunks.checks[0]
    assert (check.outcome, check.held, check.interval) == ("inconclusive", "bucket", (512, 1024))
    assert check.bucket == "512 to 1024" and "512 to 1024" in check.reason
    assert chunks.suggestion == "inconclusive"
    assert result.ranking[0] == "tp-straggler"


@pytest.mark.parametrize(
    ("tokens", "outcome", "bucket"),
    [
        ({"iteration_tokens_p99": 900, "iteration_tokens_p99_lo": 800,
          "iteration_tokens_p99_hi": 1024}, "confirm", "800 to 1024"),
        # The rank in the +Inf bucket: no upper bound, wholly over 768 all the same.
        ({"iteration_tokens_p99": 8192, "iteration_tokens_p99_lo": 8192}, "confirm",
         "above 8192"),
        # Wholly under 563, but a p99 does not see one oversized step in a hundred (below).
        ({"iteration_tokens_p99": 500, "iteration_tokens_p99_lo": 256,
          "iteration_tokens_p99_hi": 512}, "inconclusive", "256 to 512"),
        # 540 is under the 563 that eliminates, but its bucket reaches 1,024.
        ({"iteration_tokens_p99": 540, "iteration_tokens_p99_lo": 512,
          "iteration_tokens_p99_hi": 1024}, "inconclusive", "512 to 1024"),
    ],
)  # fmt: skip
def test_a_quantile_decides_only_when_its_whole_bucket_is_on_one_side(tokens, outcome, bucket):
    check = itl_spikes(tokens).find("oversized-prefill-chunks").checks[0]
    assert (check.outcome, check.bucket) == (outcome, bucket)


def test_a_p99_below_the_budget_does_not_rule_out_one_oversized_step_in_a_hundred():
    """Drawn long-prefill-itl and prefill-unchunked: tokens per step at p99 of 1,690 (wholly
    under 2,253) eliminated oversized chunks that were the cause. One step in a hundred
    carrying 4,096 tokens moves a p99 ITL over the ceiling and leaves the p99 of tokens per
    step where the other 99 are: it still confirms, it never eliminates alone."""
    under = itl_spikes(
        {"iteration_tokens_p99": 500, "iteration_tokens_p99_lo": 256,
         "iteration_tokens_p99_hi": 512}
    )  # fmt: skip
    chunks = under.find("oversized-prefill-chunks")
    check = chunks.checks[0]
    assert (check.outcome, check.held) == ("inconclusive", "rare")
    assert "does not see steps rarer than 1 in 100" in check.reason
    assert check.needs_more.startswith("needs evidence that sees rare steps")
    assert chunks.suggestion == "inconclusive"
    over = itl_spikes({"iteration_tokens_p99": 8192, "iteration_tokens_p99_lo": 8192})
    assert over.find("oversized-prefill-chunks").checks[0].outcome == "confirm"


def _by_id(node, check_id: str):
    return next(c for c in node.checks if c.id == check_id)


@pytest.mark.parametrize(
    ("steps", "outcome"),
    [(None, "inconclusive"), (200, "inconclusive"), (299, "inconclusive"), (300, "eliminate")],
)
def test_a_traces_slowest_step_rules_out_a_rare_cause_only_from_enough_steps(steps, outcome):
    """A 200-step trace expects two steps of a cause in one step of a hundred: its slowest
    step being ordinary says little. From 300 steps (three expected) it is evidence."""
    view = engine_view(10, {"itl_p99": 0.26, "itl_p50": 0.055})
    view[("artifact", "artifact_prefill_step_excess_ms")] = [("", [(NOW - 60, 1.0)])]
    if steps is not None:
        view[("artifact", "artifact_step_count")] = [("", [(NOW - 60, float(steps))])]
    result = evaluate(playbooks()["itl-spikes"], ATLAS, view, NOW)
    check = _by_id(result.find("oversized-prefill-chunks"), "prefill-step-excess")
    assert check.outcome == outcome
    if outcome == "inconclusive":
        assert check.held == "rare" and "needs ≥ 300 steps" in check.reason


def test_only_the_eliminating_side_asks_for_the_rare_share():
    view = engine_view(10, {"itl_p99": 0.26, "itl_p50": 0.055})
    view[("artifact", "artifact_prefill_step_excess_ms")] = [("", [(NOW - 60, 500.0)])]
    view[("artifact", "artifact_step_count")] = [("", [(NOW - 60, 50.0)])]
    result = evaluate(playbooks()["itl-spikes"], ATLAS, view, NOW)
    assert _by_id(result.find("oversized-prefill-chunks"), "prefill-step-excess").outcome == (
        "confirm"
    )


def test_the_max_of_quantiles_lies_between_the_largest_bounds():
    view = engine_view(10, {})
    view[("engine", "iteration_tokens_p99")] = [("", [(NOW - 5, 900.0), (NOW, 600.0)])]
    view[("engine", "iteration_tokens_p99_lo")] = [("", [(NOW - 5, 800.0), (NOW, 512.0)])]
    view[("engine", "iteration_tokens_p99_hi")] = [("", [(NOW - 5, 1024.0), (NOW, 1024.0)])]
    result = evaluate(playbooks()["itl-spikes"], ATLAS, view, NOW)
    check = result.find("oversized-prefill-chunks").checks[0]
    assert (check.measured, check.interval, check.outcome) == (900.0, (800.0, 1024.0), "confirm")


def test_a_mean_of_too_few_observations_is_not_evidence():
    slow = {"prefill_time_mean": 2.0, "prompt_tokens_rate": 3000, "e2e_count_rate": 1.5}
    few = high_ttft(engine_view(10, {**slow, "prefill_time_window_count": 3}))
    check = few.find("prefill-slow").checks[0]
    assert (check.measured, check.outcome, check.held) == (None, "inconclusive", "observations")
    assert "needs ≥ 5 observations" in check.reason
    enough = high_ttft(engine_view(10, {**slow, "prefill_time_window_count": 12}))
    check = enough.find("prefill-slow").checks[0]
    assert (check.outcome, check.count) == ("confirm", 12)


# --- ranking a person can trust -------------------------------------------------------


def slow_prefill_view() -> dict:
    """Prefill ~2.4x the budgeted wall time with the queue and KV healthy, no router data."""
    return engine_view(
        300,
        {
            "ttft_p95": 1.2,
            "requests_waiting": 4,
            "requests_running": 20,
            "kv_cache_usage": 0.5,
            "preemptions_rate": 0.0,
            "prompt_tokens_rate": 2000 * 1.5,
            "e2e_count_rate": 1.5,
            # 2.4x one 2,000-token prompt's wall time beside 20 decodes and a prefill lane
            # 38 % busy: 5 steps of 492 tokens at 62.92 ms / (1 - 0.384) = 0.51 s.
            "prefill_time_mean": 2.4 * 5 * 0.06292 / (1 - 3000 * 0.06292 / 492),
            "prefill_time_window_count": 60,
            "queue_time_p95": 0.05,
            "queue_time_p95_lo": 0.025,
            "queue_time_p95_hi": 0.1,
        },
    )


# A cause under a parent whose own check rules the parent out (the shape high-ttft had
# when slow prefill sat under the queue): the rules below hold for any tree.
UNDER_A_SHORT_QUEUE = """
schema: 1
key: high-ttft
version: 1
title: t
summary: s
alarm:
  measure: {source: engine, signal: ttft_p95}
  when: {op: ">", value: 1}
hypotheses:
  - key: router-latency
    title: t
    rationale: r
    prior: 0.15
    checks:
      - {id: router, title: r, measure: {source: prometheus, signal: router_forward_p95,
                                          promql: router_p95},
         confirm: {op: ">=", value: 0.1}, eliminate: {op: "<", value: 0.02}}
  - key: engine-queue
    title: t
    rationale: r
    prior: 0.85
    checks:
      - {id: depth, title: d, measure: {source: engine, signal: requests_waiting, reduce: mean},
         confirm: {op: ">", value: budget.queue_baseline_high},
         eliminate: {op: "<=", value: budget.queue_baseline_high}}
    children:
      - key: prefill-slow
        title: t
        rationale: r
        prior: 0.3
        checks:
          - {id: prefill, title: p,
             measure: {source: engine, signal: prefill_time_mean, reduce: max},
             confirm: {op: ">", value: 2 * expected.prefill_s},
             eliminate: {op: "<=", value: 1.25 * expected.prefill_s}}
"""


def under_a_short_queue(observations):
    return evaluate(parse_playbook(UNDER_A_SHORT_QUEUE), ATLAS, observations, NOW)


def test_slow_prefill_is_not_judged_by_the_queue():
    # Slow prefill lengthens TTFT with or without a queue: in high-ttft it is a root, and a
    # short queue neither eliminates it nor lowers its score.
    result = high_ttft(slow_prefill_view())
    assert "prefill-slow" in [h.key for h in playbooks()["high-ttft"].hypotheses]
    assert result.find("engine-queue").checks[0].outcome == "eliminate"
    prefill = result.find("prefill-slow")
    assert prefill.suggestion == "confirm"
    assert prefill.score == pytest.approx(0.25 * 4)
    assert result.ranking[0] == "prefill-slow"
    assert result.leading_path() == ("prefill-slow",)


def test_a_cause_with_no_data_never_ranks_above_one_with_evidence_for_it():
    result = under_a_short_queue(slow_prefill_view())
    router, prefill = result.find("router-latency"), result.find("prefill-slow")
    assert router.evidence_count == 0 and router.suggestion == "inconclusive"
    assert prefill.suggestion == "confirm"
    # By score alone the router's prior (0.15, nothing against it) beats a prefill under a
    # parent whose queue is short; evidence for a cause outranks no evidence at all.
    assert router.score > prefill.score
    assert result.ranking[0] == "prefill-slow"
    assert result.ranking.index("router-latency") > result.ranking.index("prefill-slow")


def test_a_parent_follows_a_child_that_suggests_confirm():
    result = under_a_short_queue(slow_prefill_view())
    queue = result.find("engine-queue")
    assert queue.checks[0].outcome == "eliminate"  # its own check: the queue is short
    assert queue.suggestion == "inconclusive"
    assert "prefill-slow suggests confirm" in queue.note


def test_a_parent_whose_own_checks_say_nothing_takes_its_childrens_word():
    def result(kv: float):
        # Two minutes of scrapes: enough for "the max stayed below" to speak for the window.
        view = engine_view(120, {"kv_cache_usage": kv})
        return evaluate(parse_playbook(TREE), ATLAS, view, NOW)

    ruled_out = result(0.5).find("engine-queue")
    assert ruled_out.checks[0].outcome == "inconclusive"  # no queue data
    assert (ruled_out.suggestion, ruled_out.note) == ("eliminate", "every child suggests eliminate")
    supported = result(0.95).find("engine-queue")
    assert (supported.suggestion, supported.note) == (
        "confirm",
        "kv-cache-pressure suggests confirm",
    )


TREE = """
schema: 1
key: high-ttft
version: 1
title: t
summary: s
alarm:
  measure: {source: engine, signal: ttft_p95}
  when: {op: ">", value: 1}
hypotheses:
  - key: engine-queue
    title: t
    rationale: r
    prior: 0.8
    checks:
      - {id: depth, title: d, measure: {source: engine, signal: requests_waiting},
         confirm: {op: ">", value: 8}, eliminate: {op: "<=", value: 8}}
    children:
      - key: kv-cache-pressure
        title: t
        rationale: r
        prior: 0.5
        checks:
          - {id: kv, title: k, measure: {source: engine, signal: kv_cache_usage, reduce: max},
             confirm: {op: ">=", value: 0.9}, eliminate: {op: "<", value: 0.8}}
      - key: queue-backlog
        title: t
        rationale: r
        prior: 0.5
        checks:
          - {id: depth-again, title: d, measure: {source: engine, signal: requests_waiting},
             confirm: {op: ">", value: 8}, eliminate: {op: "<=", value: 8}}
          - {id: kv-busy, title: k, measure: {source: engine, signal: kv_cache_usage, reduce: max},
             eliminate: {op: "<", value: 0.8}}
"""


def test_a_measurement_an_ancestor_counted_is_not_counted_again():
    view = engine_view(10, {"requests_waiting": 40, "kv_cache_usage": 0.85})
    result = evaluate(parse_playbook(TREE), ATLAS, view, NOW)
    parent = result.find("engine-queue")
    backlog = result.find("queue-backlog")
    assert parent.score == pytest.approx(0.8 * 4)
    # Its own copy of the parent's check still shows and still decides its suggestion.
    assert [c.outcome for c in backlog.checks] == ["confirm", "inconclusive"]
    assert backlog.suggestion == "inconclusive"
    assert backlog.score == pytest.approx(parent.score * 0.5)


def test_the_leading_path_runs_from_a_root_to_the_most_likely_cause():
    result = under_a_short_queue(slow_prefill_view())
    assert result.leading_path() == ("engine-queue", "prefill-slow")
