from __future__ import annotations

from pathlib import Path

import pytest

from probes.parsing.engine import detect_flavour, engine_signals
from probes.parsing.exposition import parse_exposition
from probes.parsing.windowed import bucket_quantile
from tests.probes.fixtures.scrapes import vllm_v1_scrape
from tests.support.samples import METRICS, samples_absent

SAMPLES = METRICS
needs_samples = pytest.mark.skipif(samples_absent(METRICS), reason="shared samples not mounted")


def _signals(path: str):
    return engine_signals(parse_exposition((SAMPLES / path).read_bytes()))


@needs_samples
def test_sglang_sample():
    sig = _signals("sglang_v0.4_docs_llama31-8b_under_load.prom")
    assert sig.flavour == "sglang"
    assert sig.model_names == ("meta-llama/Llama-3.1-8B-Instruct",)
    assert sig.gauges["kv_cache_usage"].value == 0.28
    assert sig.gauges["requests_running"].value == 162
    assert sig.gauges["requests_waiting"].value == 2826
    assert sig.counters["prompt_tokens_total"].value == 8128902.0
    assert sig.counters["generation_tokens_total"].value == 7557572.0
    assert sig.sources["itl"] == "sglang:time_per_output_token_seconds"  # old name alias
    ttft = sig.histograms["ttft"]
    assert ttft.buckets[0][0] == 0.001 and ttft.count == ttft.buckets[-1][1]
    assert "preemptions_total" not in sig.counters


@needs_samples
def test_truncated_vllm_v0_sample():
    sig = _signals("vllm_v0_aibrix_docs_qwen25-coder-1.5b_truncated.prom")
    assert sig.flavour == "vllm-v0"
    assert sig.sources["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert sig.counters["prompt_tokens_total"].value == 148
    assert sig.counters["generation_tokens_total"].value == 955
    assert sig.counters["requests_finished_total"].value == 4
    assert sig.gauges["requests_swapped"].value == 0
    assert "iteration_tokens" not in sig.histograms  # truncated: flagged, never used
    assert any("iteration_tokens_total" in p for p in sig.problems)


@needs_samples
def test_dcgm_sample_is_not_an_engine():
    assert _signals("dcgm_exporter_tesla-t4_datadog_fixture.prom").flavour == "unknown"


def test_vllm_v1_aggregates_across_engines_and_reads_buckets_from_scrape():
    exp = parse_exposition(vllm_v1_scrape(engines=3, seed=7))
    sig = engine_signals(exp)
    assert sig.flavour == "vllm-v1"
    kv = sig.gauges["kv_cache_usage"]
    assert kv.value == max(v for _, v in kv.per_rank) and len(kv.per_rank) == 3
    running = exp.samples("vllm:num_requests_running")
    assert sig.gauges["requests_running"].value == sum(s.value for s in running)
    tokens = exp.samples("vllm:prompt_tokens_total")
    assert sig.counters["prompt_tokens_total"].value == sum(s.value for s in tokens)
    reasons = exp.samples("vllm:request_success_total")
    assert sig.counters["requests_finished_total"].value == sum(s.value for s in reasons)
    itl = sig.histograms["itl"]
    assert itl.count == sum(h.count for _, h in itl.per_rank)
    assert [b for b, _ in itl.buckets][:3] == [0.01, 0.025, 0.05]
    # V1's "iteration tokens" count prompts whole at their first token: not per step.
    assert "iteration_tokens" not in sig.histograms
    assert sig.histograms["output_batch_tokens"].buckets[-2][0] == 16384
    assert 0 < bucket_quantile(0.95, sig.histograms["ttft"].buckets) < 2560


def test_aliases_both_directions_and_custom_buckets():
    old_only = "\n".join(
        [
            "# TYPE vllm:gpu_cache_usage_perc gauge",
            'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5',
            "# TYPE vllm:time_per_output_token_seconds histogram",
            'vllm:time_per_output_token_seconds_bucket{engine="0",le="0.7",model_name="m"} 1',
            'vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2',
        ]
    )
    sig = engine_signals(parse_exposition(old_only))
    assert sig.gauges["kv_cache_usage"].value == 0.5
    assert sig.histograms["itl"].buckets == ((0.7, 1.0), (float("inf"), 2.0))
    both = vllm_v1_scrape(engines=1, legacy_names=True)
    sig = engine_signals(parse_exposition(both))
    assert sig.sources["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert sig.sources["itl"] == "vllm:inter_token_latency_seconds"


def test_sglang_modern_labels_collapse_tp_duplicates_and_sum_dp():
    lines = ["# TYPE sglang:num_running_reqs gauge"]
    for dp, running in ((0, 10), (1, 4)):
        for tp in range(4):  # --enable-metrics-for-all-schedulers repeats per TP rank
            lines.append(
                f'sglang:num_running_reqs{{dp_rank="{dp}",engine_type="unified",'
                f'model_name="m",tp_rank="{tp}"}} {running}'
            )
    lines += [
        "# TYPE sglang:num_retracted_requests_total counter",
        'sglang:num_retracted_requests_total{dp_rank="0",model_name="m",tp_rank="0"} 7',
        'sglang:num_retracted_requests_total{dp_rank="1",model_name="m",tp_rank="0"} 5',
        "# TYPE sglang:token_usage gauge",
        'sglang:token_usage{dp_rank="0",model_name="m",tp_rank="0"} 0.91',
        'sglang:token_usage{dp_rank="1",model_name="m",tp_rank="0"} 0.2',
    ]
    sig = engine_signals(parse_exposition("\n".join(lines) + "\n"))
    assert sig.flavour == "sglang"
    assert sig.gauges["requests_running"].value == 14
    assert len(sig.gauges["requests_running"].per_rank) == 8
    assert sig.counters["preemptions_total"].value == 12
    assert sig.gauges["kv_cache_usage"].value == 0.91


def test_detect_flavour_old_sglang_name_label():
    text = '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{name="/models/x"} 3\n'
    exp = parse_exposition(text)
    assert detect_flavour(exp) == "sglang"
    assert engine_signals(exp).model_names == ("/models/x",)


REAL_V1 = Path(__file__).resolve().parents[1] / "realengine" / "captures"


def test_a_real_v1_scrape_reads_its_iteration_tokens_as_batches_of_outputs():
    """vLLM 0.32 on CPU, 1,600-1,900-token prompts under a 2,048-token budget: the family
    books each prompt whole where its first token comes out (loggers.py: computed prompt
    tokens + generated tokens), 56 of 4,450 observations in (1024, 2048]. It is kept as
    ``output_batch_tokens``, an upper bound on a step's tokens, never as tokens per step."""
    text = (REAL_V1 / "vllm-0.32-cpu-long-prefill.metrics.txt").read_text()
    sig = engine_signals(parse_exposition(text))
    assert sig.flavour == "vllm-v1"
    assert "iteration_tokens" not in sig.histograms
    batches = sig.histograms["output_batch_tokens"]
    assert sig.sources["output_batch_tokens"] == "vllm:iteration_tokens_total"
    assert batches.count == 4450
    assert dict(batches.buckets)[2048.0] - dict(batches.buckets)[1024.0] == 56


def test_a_v0_scrape_keeps_its_per_step_histogram():
    text = "\n".join(
        [
            "# TYPE vllm:gpu_cache_usage_perc gauge",
            "vllm:gpu_cache_usage_perc 0.5",
            "# TYPE vllm:iteration_tokens_total histogram",
            'vllm:iteration_tokens_total_bucket{le="512.0"} 9',
            'vllm:iteration_tokens_total_bucket{le="+Inf"} 10',
            "vllm:iteration_tokens_total_sum 3000",
            "vllm:iteration_tokens_total_count 10",
            "",
        ]
    )
    sig = engine_signals(parse_exposition(text))
    assert sig.flavour == "vllm-v0"
    assert sig.histograms["iteration_tokens"].count == 10
    assert "output_batch_tokens" not in sig.histograms
