"""The TensorRT-LLM flavour: one table entry in probes/parsing/engine.py.

The body below is written for this test from the documented names and labels (no real
capture of trtllm-serve exists in samples/real yet): reference/engine-metrics-2026.md
"Other engines", TensorRT-LLM's MetricsCollector and Dynamo's ``trtllm_`` prefix.
"""

from __future__ import annotations

import pytest

from probes import observe
from probes.parsing.engine import (
    KNOWN_ENGINES,
    EngineScrapeUnusable,
    detect_flavour,
    engine_name,
    engine_signals,
    require_usable,
    unmapped_families,
)
from probes.parsing.exposition import parse_exposition
from probes.vocabulary import known_signal

_L = 'model_name="Qwen/Qwen3-0.6B",engine_type="trtllm"'


def _hist(name: str, bounds: tuple[float, ...], counts: tuple[int, ...], total: float) -> list:
    lines = [f"# TYPE {name} histogram"]
    for le, c in zip((*map(str, bounds), "+Inf"), counts, strict=True):
        lines.append(f'{name}_bucket{{le="{le}",{_L}}} {c}.0')
    lines += [f"{name}_count{{{_L}}} {counts[-1]}.0", f"{name}_sum{{{_L}}} {total}"]
    return lines


TRTLLM = "\n".join(
    [
        "# TYPE trtllm_request_success_total counter",
        f'trtllm_request_success_total{{{_L},finished_reason="stop"}} 150.0',
        f'trtllm_request_success_total{{{_L},finished_reason="length"}} 5.0',
        "# TYPE trtllm_num_requests_running gauge",
        f"trtllm_num_requests_running{{{_L}}} 7.0",
        "# TYPE trtllm_num_requests_waiting gauge",
        f"trtllm_num_requests_waiting{{{_L}}} 2.0",
        "# TYPE trtllm_kv_cache_utilization gauge",
        f"trtllm_kv_cache_utilization{{{_L}}} 0.42",
        *_hist("trtllm_time_to_first_token_seconds", (0.01, 0.05, 0.1), (0, 12, 140, 155), 8.75),
        *_hist("trtllm_time_per_output_token_seconds", (0.01, 0.1), (30, 120, 155), 12.5),
        *_hist("trtllm_e2e_request_latency_seconds", (0.5, 1.0), (25, 100, 155), 45.2),
        *_hist("trtllm_request_queue_time_seconds", (0.3, 1.0), (100, 140, 155), 32.1),
    ]
)


def test_detected_and_read_as_canonical_signals():
    sig = engine_signals(parse_exposition(TRTLLM))
    assert sig.flavour == "trtllm" and engine_name(sig.flavour) == "TensorRT-LLM"
    assert sig.model_names == ("Qwen/Qwen3-0.6B",)
    assert sig.gauges["requests_running"].value == 7.0
    assert sig.gauges["requests_waiting"].value == 2.0
    assert sig.gauges["kv_cache_usage"].value == pytest.approx(0.42)
    assert sig.counters["requests_finished_total"].value == 155.0  # over finished_reason
    assert set(sig.histograms) == {"ttft", "itl", "e2e", "queue_time"}
    assert sig.histograms["ttft"].count == 155.0
    assert sig.sources["itl"] == "trtllm_time_per_output_token_seconds"
    assert not sig.problems and not unmapped_families(TRTLLM)


def test_the_colon_spelling_is_the_same_engine():
    """Dynamo's earlier docs spell the prefix ``trtllm:``; both fold to one family name."""
    sig = engine_signals(parse_exposition(TRTLLM.replace("trtllm_", "trtllm:")))
    assert sig.flavour == "trtllm" and sig.gauges["requests_running"].value == 7.0
    assert sig.sources["requests_running"] == "trtllm:num_requests_running"


def test_observations_are_known_signals():
    seen = observe.observe_engine(TRTLLM.encode(), [], 1000.0, 60.0)
    assert seen.snapshot["flavour"] == "trtllm"
    names = {s for s, _, _ in seen.observations}
    assert names and all(known_signal("engine", s) for s in names), names


def test_other_flavours_are_not_taken_for_it():
    vllm = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n"
    assert detect_flavour(parse_exposition(vllm)) != "trtllm"


def test_unusable_answer_names_it():
    body = "# TYPE trtllm_some_future_family gauge\ntrtllm_some_future_family 1\n"
    exp = parse_exposition(body)
    with pytest.raises(EngineScrapeUnusable, match="TensorRT-LLM series in the answer"):
        require_usable(exp, engine_signals(exp))
    assert unmapped_families(body) == {"trtllm_some_future_family"}
    assert "TensorRT-LLM" in KNOWN_ENGINES
