"""The evidence rules two incidents at once lean on, as pure evaluations: the average prompt
is per first token (as vLLM V1 counts prompt tokens), and a KV floor seen for a poll or two
can rule a block leak out but never in. Plus the pair tables' own consistency."""

from __future__ import annotations

import pytest

from deployments.budget import Budget
from enginesim import scenarios
from enginesim.config import GiB
from investigations.evaluation import evaluate
from investigations.playbook import playbooks
from tests.matrix.cases import (
    KNOWN_PAIR_GAPS,
    PAIR_BUDGETS,
    PAIR_OPENS,
    PAIRS,
    case_of,
)

NOW = 10_000.0


def _points(value: float, span: float = 15.0):
    return [(NOW - span, value), (NOW, value)]


def _storm(overrides: dict | None = None) -> dict:
    """A preemption storm two polls long: 40 running ~2,400-token conversations hold the
    cache, 30 first tokens a minute come out while only 12 requests finish."""
    obs = {
        ("engine", "requests_running"): [("", _points(40))],
        ("engine", "requests_waiting"): [("", _points(50))],
        ("engine", "kv_cache_usage"): [("", _points(0.99))],
        ("engine", "preemptions_rate"): [("", _points(1.0))],
        ("engine", "prompt_tokens_rate"): [("", _points(2400 * 0.5))],
        ("engine", "ttft_count_rate"): [("", _points(0.5))],
        ("engine", "e2e_count_rate"): [("", _points(0.2))],
        ("engine", "generation_tokens_rate"): [("", _points(700 * 0.2))],
    }
    obs.update(overrides or {})
    return obs


def test_the_average_prompt_is_per_first_token_not_per_finished_request():
    result = evaluate(playbooks()["high-ttft"], Budget(), _storm(), NOW)
    assert result.expected["expected.avg_prompt_tokens"] == pytest.approx(2400)
    # 40 x (2,400 + 350) of 114,688: the running requests explain the full cache.
    assert result.expected["expected.kv_usage_of_running"] == pytest.approx(40 * 2750 / 114688)
    assert result.find("kv-block-leak").suggestion == "eliminate"
    assert result.find("kv-cache-pressure").suggestion == "confirm"
    # Without a first-token count the finished requests are the denominator, as before.
    older = _storm()
    del older[("engine", "ttft_count_rate")]
    assert evaluate(playbooks()["high-ttft"], Budget(), older, NOW).expected[
        "expected.avg_prompt_tokens"
    ] == pytest.approx(6000)


def test_a_short_high_kv_floor_does_not_confirm_a_block_leak_but_a_low_one_rules_it_out():
    gpu_oom = playbooks()["gpu-oom"]
    full = evaluate(gpu_oom, Budget(), _storm(), NOW).find("kv-block-leak")
    floor = next(c for c in full.checks if c.id == "kv-usage-floor")
    assert floor.measured == pytest.approx(0.99) and floor.outcome == "inconclusive"
    assert full.suggestion == "eliminate"  # what the running requests hold explains it
    low = _storm({("engine", "kv_cache_usage"): [("", _points(0.3))]})
    floor = next(
        c
        for c in evaluate(gpu_oom, Budget(), low, NOW).find("kv-block-leak").checks
        if c.id == "kv-usage-floor"
    )
    assert floor.outcome == "eliminate"


def test_the_pair_tables_name_real_pairs_symptoms_and_budget_fields():
    budget_fields = set(Budget.__dataclass_fields__)
    for name, opens in PAIR_OPENS.items():
        assert name in PAIRS, name
        assert set(opens) <= set(case_of(name).symptoms), name
    for name, fields in PAIR_BUDGETS.items():
        assert name in PAIRS and set(fields) <= budget_fields, name
    assert set(KNOWN_PAIR_GAPS) <= set(PAIRS)
    for pair in (*scenarios.PAIR_DEFAULTS, *scenarios.PAIR_CONFIG):
        assert "+".join(sorted(pair)) in PAIRS, pair


def test_a_pinned_kv_cache_is_registered_in_the_pairs_budget():
    """A pair's deployment that pins its KV cache registers it, or the expected usage of
    the running requests (and every leak check on it) is computed for the wrong cache."""
    for pair, config in scenarios.PAIR_CONFIG.items():
        pinned = config.get("kv_cache_memory_bytes")
        if pinned is None:
            continue
        name = "+".join(sorted(pair))
        assert PAIR_BUDGETS[name]["kv_budget_gib_per_rank"] == pinned / GiB, name
