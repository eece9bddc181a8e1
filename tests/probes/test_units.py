"""A signal's unit comes from its name, most specific pattern first."""

from __future__ import annotations

import pytest

from probes.vocabulary import unit_of, with_unit


@pytest.mark.parametrize(
    ("signal", "unit"),
    [
        ("ttft_p95", "s"),
        ("itl_p99_hi", "s"),
        ("prefill_time_mean", "s"),
        ("iteration_tokens_p99", "tokens"),
        ("cache_hit_rate", "fraction"),
        ("preemptions_rate", "/s"),
        ("generation_tokens_rate", "tokens/s"),
        ("kv_cache_usage", "fraction"),
        ("gpu_gpu_util_pct", "%"),
        ("gpu_sm_clock_mhz", "MHz"),
        ("gpu_fb_used_mib", "MiB"),
        ("gpu_temp_c", "°C"),
        ("power_w", "W"),
        ("artifact_gc_pause_max_ms", "ms"),
        ("artifact_graph_pool_growth_bytes", "B"),
        ("artifact_allocated_slope_bytes_per_s", "B/s"),
        ("requests_waiting", "requests"),
        ("log_events", "events"),
        ("gpu_clock_events", ""),
    ],
)
def test_unit_of(signal: str, unit: str) -> None:
    assert unit_of(signal) == unit


def test_with_unit_reads_fractions_as_percent() -> None:
    assert with_unit(0.9, "kv_cache_usage") == "90 %"
    assert with_unit(0.35, "ttft_p95") == "0.35 s"
    assert with_unit(3, "gpu_clock_events") == "3"
