"""Evaluation divides by the engine's own KV capacity where the engine reports it, and
counts the running requests' KV in whole blocks where it says how big they are."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from deployments.budget import Budget, kv_capacity_tokens
from investigations.evaluation import (
    FROM_BUDGET,
    FROM_ENGINE,
    capacity_source,
    evaluate,
    expected_values,
    kv_capacity,
)
from investigations.playbook import playbooks
from probes.observe import observe_engine
from tests.investigations.test_evaluation import NOW, flat, walkthrough_1

ATLAS = Budget()
CAPTURES = Path(__file__).resolve().parents[1] / "realengine" / "captures"


def traffic(running: float, usage: float, prompt: float, output: float) -> dict:
    """One request a second of ``prompt`` tokens in and ``output`` tokens out."""
    return {
        ("engine", "requests_running"): [("", flat(running))],
        ("engine", "kv_cache_usage"): [("", flat(usage))],
        ("engine", "prompt_tokens_rate"): [("", flat(prompt))],
        ("engine", "e2e_count_rate"): [("", flat(1.0))],
        ("engine", "generation_tokens_rate"): [("", flat(output))],
    }


def test_without_an_engine_report_the_budget_constants_are_used():
    expected = expected_values(ATLAS, traffic(10, 0.5, 300, 300), NOW)
    assert expected["expected.kv_capacity_tokens"] == kv_capacity_tokens(ATLAS)
    assert capacity_source(expected) == FROM_BUDGET
    assert expected["expected.kv_block_size"] is None
    # Per token: 10 x (300 + 150) / 114,688.
    assert expected["expected.kv_usage_of_running"] == pytest.approx(
        10 * 450 / kv_capacity_tokens(ATLAS)
    )


def test_the_engines_capacity_and_blocks_are_used_when_reported():
    obs = {
        **traffic(10, 0.5, 300, 300),
        ("engine", "kv_capacity_tokens"): [("target=a", flat(12_288))],
        ("engine", "kv_block_size"): [("target=a", flat(128))],
    }
    expected = expected_values(ATLAS, obs, NOW)
    assert expected["expected.kv_capacity_tokens"] == 12_288
    assert capacity_source(expected) == FROM_ENGINE
    # 450 tokens a request in 128-token blocks: 4 blocks, 512 tokens each.
    assert expected["expected.kv_usage_of_running"] == pytest.approx(10 * 512 / 12_288)
    assert expected["expected.avg_context_tokens"] == pytest.approx(0.5 * 12_288 / 10)


def test_a_capacity_without_a_block_size_counts_per_token():
    obs = {
        **traffic(10, 0.5, 300, 300),
        ("engine", "kv_capacity_tokens"): [("target=a", flat(12_288))],
    }
    expected = expected_values(ATLAS, obs, NOW)
    assert expected["expected.kv_usage_of_running"] == pytest.approx(10 * 450 / 12_288)


def test_of_several_engines_the_smallest_latest_capacity_and_a_stale_one_is_not_used():
    two = {
        ("engine", "kv_capacity_tokens"): [
            ("target=a", [*flat(20_000)[:-1], (NOW, 16_000)]),  # restarted smaller: latest
            ("target=b", flat(18_000)),
        ]
    }
    assert kv_capacity(ATLAS, two, NOW).tokens == 16_000
    stale = {("engine", "kv_capacity_tokens"): [("target=a", [(NOW - 3600, 12_288)])]}
    assert kv_capacity(ATLAS, stale, NOW).from_engine is False


def test_sglang_token_capacity_stands_in_when_the_metrics_carry_none():
    obs = {("sglang_info", "sglang_token_capacity"): [("target=s,tp_rank=0", flat(50_000))]}
    capacity = kv_capacity(ATLAS, obs, NOW)
    assert (capacity.tokens, capacity.source) == (50_000, FROM_ENGINE)


def test_the_fix_divides_by_the_capacity_the_context_was_measured_in():
    """kv-cache-pressure's max-num-seqs from the observed context: with the engine's pool
    a quarter of the budget's (and requests a quarter as long, as 94 % of it held by 40
    of them says), the context is a quarter and so is the pool it must fit."""
    budget_only = evaluate(playbooks()["high-ttft"], ATLAS, walkthrough_1(), NOW)
    quarter = kv_capacity_tokens(ATLAS) / 4
    reported = walkthrough_1({
        ("engine", "kv_capacity_tokens"): [("target=a", flat(quarter))],
        ("engine", "prompt_tokens_rate"): [("", flat(500 * 1.5))],
        ("engine", "generation_tokens_rate"): [("", flat(1.5 * 275))],
    })  # fmt: skip
    engine = evaluate(playbooks()["high-ttft"], ATLAS, reported, NOW)
    for value in ("avg_context_tokens", "context_reached_tokens"):
        assert engine.expected[f"expected.{value}"] == pytest.approx(
            budget_only.expected[f"expected.{value}"] / 4
        )
    seqs = engine.find("kv-cache-pressure").fix.parameters["max_num_seqs"]
    assert seqs == budget_only.find("kv-cache-pressure").fix.parameters["max_num_seqs"]


def _capture_observations(name: str, uptime_s: float = 600.0) -> dict:
    """A real vLLM 0.32 scrape through the probe's own path, its counters read against
    the engine's start (every counter 0 then) ``uptime_s`` earlier."""
    body = (CAPTURES / name).read_bytes()
    first = observe_engine(body, [], NOW, uptime_s + 1)
    start = copy.deepcopy(first.snapshot)
    start["counters"] = dict.fromkeys(start["counters"], 0.0)
    for histogram in start["histograms"].values():
        histogram["buckets"] = [[le, 0.0] for le, _ in histogram["buckets"]]
        histogram["count"], histogram["sum"] = 0.0, 0.0
    observed = observe_engine(body, [(NOW - uptime_s, start)], NOW, uptime_s + 1)
    out: dict = {}
    for signal, labels, value in observed.observations:
        if not labels:
            out.setdefault(("engine", signal), []).append(("target=real", [(NOW, value)]))
    return out


def test_the_real_kv_pressure_capture_is_judged_against_its_own_96_blocks_of_128():
    obs = _capture_observations("vllm-0.32-cpu-kv-pressure.metrics.txt")
    value = {signal: series[0][1][0][1] for (_, signal), series in obs.items()}
    expected = expected_values(ATLAS, obs, NOW)
    assert expected["expected.kv_capacity_tokens"] == value["kv_blocks"] * value["kv_block_size"]
    assert capacity_source(expected) == FROM_ENGINE
    # The average request since start: prompt per first token, output per finished request.
    prompt = value["prompt_tokens_rate"] / value["ttft_count_rate"]
    output = value["generation_tokens_rate"] / value["e2e_count_rate"]
    blocks = math.ceil((prompt + output / 2) / value["kv_block_size"])
    assert blocks * value["kv_block_size"] > prompt + output / 2
    held = value["requests_running"] * blocks * value["kv_block_size"] / 12_288
    assert expected["expected.kv_usage_of_running"] == pytest.approx(held)
    # Against the budget's 114,688 tokens the same batch would look nearly empty.
    assert held > 5 * value["requests_running"] * (prompt + output / 2) / kv_capacity_tokens(ATLAS)
    # kv-block-leak's "usage beyond what the running requests hold" now reads the engine's
    # own pool: its threshold is the block-rounded expectation, not the budget's.
    result = evaluate(playbooks()["high-ttft"], ATLAS, obs, NOW)
    leak = {c.id: c for c in result.find("kv-block-leak").checks}
    thresholds = [c.eliminate_threshold for c in leak.values() if c.eliminate_threshold]
    assert pytest.approx(held + 0.15) in thresholds
