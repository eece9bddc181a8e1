"""Bodies become snapshots and observations, with windowed values over earlier snapshots."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from probes import observe
from probes.parsing.exposition import ExpositionError
from probes.parsing.logevents import FollowerState
from tests.support.samples import METRICS, samples_absent

pytestmark = pytest.mark.skipif(samples_absent(METRICS), reason="shared samples not mounted")

VLLM_V0 = METRICS / "vllm_v0_aibrix_docs_qwen25-coder-1.5b_truncated.prom"
SGLANG = METRICS / "sglang_v0.4_docs_llama31-8b_under_load.prom"
DCGM = METRICS / "dcgm_exporter_tesla-t4_datadog_fixture.prom"


def _scaled(text: str, factor: float) -> bytes:
    """The same scrape later: every counter and bucket grew by ``factor``."""
    lines = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            lines.append(line)
            continue
        series, _, value = line.rpartition(" ")
        name = series.split("{", 1)[0]
        if name.endswith(("_bucket", "_total", "_count", "_sum")):
            value = repr(float(value) * factor)
        lines.append(f"{series} {value}")
    return ("\n".join(lines) + "\n").encode()


def test_the_snapshot_is_valid_json_for_postgres():
    seen = observe.observe_engine(SGLANG.read_bytes(), [], 1000.0, 60.0)
    text = json.dumps(seen.snapshot, allow_nan=False)  # jsonb refuses NaN/Infinity
    assert "+Inf" in text
    assert seen.snapshot["flavour"] == "sglang"


def test_gauges_are_observed_as_read():
    seen = observe.observe_engine(SGLANG.read_bytes(), [], 1000.0, 60.0)
    values = {(s, labels): v for s, labels, v in seen.observations}
    assert values[("requests_running", "")] >= 0
    assert ("kv_cache_usage", "") in values


def test_windowed_quantiles_and_rates_come_from_consecutive_scrapes():
    text = SGLANG.read_text()
    first = observe.observe_engine(_scaled(text, 1.0), [], 1000.0, 60.0)
    later = observe.observe_engine(_scaled(text, 2.0), [(970.0, first.snapshot)], 1000.0, 60.0)
    signals = {s for s, _, _ in later.observations}
    assert {"ttft_p50", "ttft_p95", "ttft_p99"} <= signals
    p50 = {s: v for s, labels, v in later.observations if not labels}
    assert p50["ttft_p50"] <= p50["ttft_p95"] <= p50["ttft_p99"]
    # A single scrape has no window: no rates, no quantiles.
    assert not any(s.endswith("_p95") for s, _, _ in first.observations)


def test_the_truncated_histogram_is_not_used():
    seen = observe.observe_engine(VLLM_V0.read_bytes(), [], 1000.0, 60.0)
    assert seen.snapshot["flavour"] == "vllm-v0"
    assert any("+Inf" in problem for problem in seen.snapshot["problems"])


def test_garbage_is_an_exposition_error():
    with pytest.raises(ExpositionError):
        observe.observe_engine(b"\x00\xff not metrics {{{", [], 1000.0, 60.0)


def test_dcgm_fields_are_labelled_per_gpu():
    seen = observe.observe_dcgm(DCGM.read_bytes())
    clocks = [(labels, v) for s, labels, v in seen.observations if s == "gpu_sm_clock_mhz"]
    assert clocks and all(labels.startswith("gpu=") for labels, _ in clocks)


def test_log_chunks_continue_across_cycles_and_flag_late_captures():
    now = datetime(2026, 2, 12, 20, 0, tzinfo=UTC)
    part1 = (
        b"(EngineCore_DP0 pid=241) INFO 02-12 19:50:09 [gpu_model_runner.py:3480] "
        b"Graph capturing finished in 8 secs, took 0.31 GiB\n"
        b"(EngineCore_DP0 pid=241) INFO 02-12 19:50:10 [core.py:210] init engine (profile, "
        b"create kv cache, warmup model) took 41.20 s\n(EngineCore_DP0 pid=241) INFO 02-12 19:5"
    )
    part2 = b"5:10 [gpu_model_runner.py:3480] Graph capturing finished in 2 secs, took 2.05 GiB\n"
    state, first = observe.observe_log(FollowerState(), part1, now)
    state = observe.state_from_json(json.loads(json.dumps(first.snapshot))["follower"])
    state, second = observe.observe_log(state, part2, now)
    assert ("log_events", "kind=cuda_graph_capture_finished", 1.0) in first.observations
    assert ("log_events", "kind=cuda_graph_capture_after_warmup", 1.0) in second.observations


def test_windowed_values_carry_what_they_rest_on():
    """Each quantile's bucket (``_lo``/``_hi``), each histogram's observations in the
    window and the seconds of scrapes behind this cycle's rates."""
    text = SGLANG.read_text()
    first = observe.observe_engine(_scaled(text, 1.0), [], 1000.0, 60.0)
    assert not any(s == "scrape_span_s" for s, _, _ in first.observations)  # no window yet
    later = observe.observe_engine(_scaled(text, 2.0), [(970.0, first.snapshot)], 1000.0, 60.0)
    values = {s: v for s, labels, v in later.observations if not labels}
    assert values["scrape_span_s"] == 30.0
    for q in ("p50", "p95", "p99"):
        assert values[f"ttft_{q}_lo"] <= values[f"ttft_{q}"]
        if f"ttft_{q}_hi" in values:
            assert values[f"ttft_{q}"] <= values[f"ttft_{q}_hi"]
    assert values["ttft_window_count"] > 0
    json.dumps(later.observations, allow_nan=False)  # no Infinity for an open bucket


def _vllm_body(prompt_tokens: float, generated: float, first_tokens: int, finished: int) -> bytes:
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 3\n'
        "# TYPE vllm:prompt_tokens_total counter\n"
        f'vllm:prompt_tokens_total{{model_name="m"}} {prompt_tokens}\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{model_name="m"}} {generated}\n'
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        f'vllm:time_to_first_token_seconds_bucket{{model_name="m",le="+Inf"}} {first_tokens}\n'
        f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {first_tokens}\n'
        f'vllm:time_to_first_token_seconds_sum{{model_name="m"}} {first_tokens * 0.2}\n'
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        f'vllm:e2e_request_latency_seconds_bucket{{model_name="m",le="+Inf"}} {finished}\n'
        f'vllm:e2e_request_latency_seconds_count{{model_name="m"}} {finished}\n'
        f'vllm:e2e_request_latency_seconds_sum{{model_name="m"}} {finished * 9.0}\n'
    ).encode()


def test_one_scrape_gives_the_engines_request_lengths_since_it_started():
    """A window with no request started or finished has no length of its own (its rates
    divide 0 by 0); the cumulative counters over the requests behind them do, from the
    first scrape on."""
    seen = observe.observe_engine(_vllm_body(8000, 2000, 10, 8), [], 1000.0, 60.0)
    values = {s: v for s, labels, v in seen.observations if not labels}
    assert values["prompt_tokens_per_request"] == pytest.approx(800)
    assert values["output_tokens_per_request"] == pytest.approx(250)
    fresh = observe.observe_engine(_vllm_body(0, 0, 0, 0), [], 1000.0, 60.0)
    assert not {"prompt_tokens_per_request", "output_tokens_per_request"} & {
        s for s, _, _ in fresh.observations
    }


def _per_point_reference(snapshot: dict, history: list, now_ts: float) -> list:
    """The windowed values as each series' own points give them (the original reading,
    one series at a time): what the columnar fast path must reproduce to the bit."""
    from probes.parsing import windowed

    out = list(observe.lifetime_lengths(snapshot))  # from the one scrape, not windowed
    series = [*history, (now_ts, snapshot)]
    span = windowed.sampled_span([ts for ts, _ in series], 60.0, now_ts)
    if span > 0:
        out.append(("scrape_span_s", "", span))
    for key in snapshot["counters"]:
        points = [(ts, s["counters"][key]) for ts, s in series if key in s["counters"]]
        value = windowed.rate(points, 60.0, now_ts)
        if observe._finite(value):
            out.append((f"{key.removesuffix('_total')}_rate", "", value))
    for key in snapshot["histograms"]:
        buckets: dict = {}
        counts, sums = [], []
        for ts, s in series:
            h = s["histograms"].get(key)
            if not h:
                continue
            for le, count in h["buckets"]:
                buckets.setdefault(float(le), []).append((ts, count))
            if h["count"] is not None and h["sum"] is not None:
                counts.append((ts, h["count"]))
                sums.append((ts, h["sum"]))
        quantiles = windowed.histogram_quantiles_and_buckets_over_window(
            observe.QUANTILES, buckets, 60.0, now_ts
        )
        out.extend(
            observe._histogram_figures(
                key,
                quantiles,
                windowed.rate(counts, 60.0, now_ts),
                windowed.rate(sums, 60.0, now_ts),
                windowed.observed_increase(counts, 60.0, now_ts),
            )
        )
    return out


@pytest.mark.parametrize("layout_change", [False, True])
def test_windowed_values_on_columns_equal_each_series_own_points(layout_change):
    """Thirteen scrapes growing unevenly, one counter reset, 5 s apart; kept rows
    (``probes.window``), dicts read back as JSON, and a scrape whose series differ."""
    from probes import window

    text = SGLANG.read_text()
    history: list = []
    snapshots = []
    for i, factor in enumerate([1, 1.5, 2, 2, 3.5, 0.5, 1, 1.2, 4, 5, 5.5, 6, 8]):
        now = 1000.0 + 5 * i
        seen = observe.observe_engine(_scaled(text, factor), history, now, 60.0)
        snapshot = seen.snapshot
        if layout_change and i == 7:
            snapshot = json.loads(json.dumps(snapshot))
            snapshot["counters"].pop(next(iter(snapshot["counters"])))
            del snapshot["histograms"][next(iter(snapshot["histograms"]))]
        snapshots.append((now, snapshot))
        windowed_part = [o for o in seen.observations if not _is_gauge(o, snapshot)]
        assert windowed_part == _per_point_reference(
            seen.snapshot, [(ts, _as_dict(h)) for ts, h in history], now
        )
        # Alternate kept rows and JSON dicts, as the poll's history mixes them.
        history.append(
            (now, window.to_row(snapshot) if i % 2 else json.loads(json.dumps(snapshot)))
        )
    assert any(s.endswith("_p99") for s, _, _ in seen.observations)


def _as_dict(h):
    from probes import window

    return h if isinstance(h, dict) else window.to_snapshot(h)


def _is_gauge(observation, snapshot) -> bool:
    return observation[0] in snapshot["gauges"]


REAL_V1_LONG_PREFILL = (
    Path(__file__).resolve().parents[1]
    / "realengine"
    / "captures"
    / "vllm-0.32-cpu-long-prefill.metrics.txt"
)


def test_v1_batches_of_outputs_carry_the_top_bucket_of_the_window():
    """A real vLLM 0.32 scrape, later doubled: the window's largest batch of outputs lies
    in (1,024, 2,048] (the 1,600-1,900-token prompts counted whole), and its bound is
    recorded: a quantile misses what is rarer than its tail, the top bucket does not."""
    text = REAL_V1_LONG_PREFILL.read_text()
    first = observe.observe_engine(_scaled(text, 1.0), [], 1000.0, 60.0)
    later = observe.observe_engine(_scaled(text, 2.0), [(970.0, first.snapshot)], 1000.0, 60.0)
    values = {s: v for s, labels, v in later.observations if not labels}
    assert values["output_batch_tokens_max_hi"] == 2048.0
    # 56 of 4,450 (1.3 %) are that big: here the p99 sees them too; at under 1 % it would not.
    assert 1024 < values["output_batch_tokens_p99"] <= values["output_batch_tokens_max_hi"]
    assert not any(s.startswith("iteration_tokens") for s in values)
