"""The flavour table: every version's names, built from the released sources' wire names
(reference/engine-metrics.md §1.3-1.5, §2.3; engine-metrics-2026.md)."""

from __future__ import annotations

import pytest

from probes import observe
from probes.parsing.engine import (
    FLAVOURS,
    KNOWN_ENGINES,
    EngineScrapeUnusable,
    base_name,
    engine_signals,
    require_usable,
    unmapped_families,
)
from probes.parsing.exposition import parse_exposition
from probes.vocabulary import known_signal
from tests.probes.fixtures.scrapes import vllm_v1_scrape


def _signals(text: str):
    return engine_signals(parse_exposition(text))


def _lines(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_v1_0_7_without_the_engine_label_is_v1():
    # vLLM 0.7/0.8 V1: labels model_name only; gpu_prefix_cache_* counters are V1's own.
    text = _lines(
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{model_name="m"} 3.0',
        "# TYPE vllm:gpu_cache_usage_perc gauge",
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.42',
        "# TYPE vllm:gpu_prefix_cache_queries_total counter",
        'vllm:gpu_prefix_cache_queries_total{model_name="m"} 100.0',
    )
    sig = _signals(text)
    assert sig.flavour == "vllm-v1"
    assert sig.gauges["kv_cache_usage"].value == 0.42
    assert sig.counters["prefix_cache_queries_total"].value == 100


def test_created_series_mark_v1_and_plain_v0_stays_v0():
    v1 = _lines(
        "# TYPE vllm:prompt_tokens_total counter",
        'vllm:prompt_tokens_total{model_name="m"} 5.0',
        "# TYPE vllm:prompt_tokens_created gauge",
        'vllm:prompt_tokens_created{model_name="m"} 1.7e9',
    )
    assert _signals(v1).flavour == "vllm-v1"
    v0 = _lines(
        "# TYPE vllm:num_requests_swapped gauge",
        'vllm:num_requests_swapped{model_name="m"} 0.0',
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{model_name="m"} 1.0',
    )
    assert _signals(v0).flavour == "vllm-v0"


V033 = _lines(
    "# TYPE vllm:num_requests_waiting gauge",
    'vllm:num_requests_waiting{engine="0",model_name="m"} 7.0',
    'vllm:num_requests_waiting{engine="1",model_name="m"} 2.0',
    "# TYPE vllm:num_requests_waiting_by_reason gauge",
    'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 5.0',
    'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 2.0',
    'vllm:num_requests_waiting_by_reason{engine="1",model_name="m",reason="capacity"} 2.0',
    'vllm:num_requests_waiting_by_reason{engine="1",model_name="m",reason="deferred"} 0.0',
    "# TYPE vllm:engine_sleep_state gauge",
    'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0',
    'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="weights_offloaded"} 0.0',
    "# TYPE vllm:admission_rejections_total counter",
    'vllm:admission_rejections_total{model_name="m",reason="max_num_queued_reqs"} 4.0',
    'vllm:admission_rejections_total{model_name="m",reason="max_num_queued_tokens"} 1.0',
    "# TYPE vllm:prompt_tokens_cached_total counter",
    'vllm:prompt_tokens_cached_total{engine="0",model_name="m"} 300.0',
    "# TYPE vllm:prompt_tokens_by_source_total counter",
    'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 700.0',
    'vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 300.0',
    "# TYPE vllm:cache_config_info gauge",
    'vllm:cache_config_info{block_size="16",engine="0",kv_cache_max_concurrency="84.29",'
    'kv_cache_size_tokens="767552",num_gpu_blocks="47972",sliding_window="None"} 1.0',
    "# TYPE vllm:estimated_flops_per_gpu_total counter",
    'vllm:estimated_flops_per_gpu_total{engine="0",model_name="m"} 1.5e15',
    "# TYPE vllm:request_num_preemptions histogram",
    'vllm:request_num_preemptions_bucket{engine="0",le="1.0",model_name="m"} 3.0',
    'vllm:request_num_preemptions_bucket{engine="0",le="+Inf",model_name="m"} 4.0',
    'vllm:request_num_preemptions_count{engine="0",model_name="m"} 4.0',
    'vllm:request_num_preemptions_sum{engine="0",model_name="m"} 6.0',
    "# TYPE vllm:request_prefill_kv_computed_tokens histogram",
    'vllm:request_prefill_kv_computed_tokens_bucket{engine="0",le="100.0",model_name="m"} 2.0',
    'vllm:request_prefill_kv_computed_tokens_bucket{engine="0",le="+Inf",model_name="m"} 2.0',
    "# TYPE vllm:kv_block_lifetime_seconds histogram",
    'vllm:kv_block_lifetime_seconds_bucket{engine="0",le="1.0",model_name="m"} 1.0',
    'vllm:kv_block_lifetime_seconds_bucket{engine="0",le="+Inf",model_name="m"} 1.0',
)


def test_v1_0_33_families():
    sig = _signals(V033)
    assert sig.flavour == "vllm-v1"
    g = {k: v.value for k, v in sig.gauges.items()}
    assert g["requests_waiting"] == 9
    assert g["requests_waiting_capacity"] == 7 and g["requests_deferred"] == 2
    assert g["engine_awake"] == 1
    assert g["kv_capacity_tokens"] == 767552  # the engine's own figure beats blocks x size
    assert g["kv_blocks"] == 47972 and g["kv_block_size"] == 16
    assert g["kv_max_concurrency"] == pytest.approx(84.29)
    c = {k: v.value for k, v in sig.counters.items()}
    assert c["admission_rejections_total"] == 5  # no engine label on this one
    assert c["prompt_tokens_cached_total"] == 300
    assert c["prompt_tokens_computed_total"] == 700 and c["prompt_tokens_cache_hit_total"] == 300
    assert "prompt_tokens_transferred_total" not in c  # no series: absent, never 0
    assert c["estimated_flops_total"] == 1.5e15
    assert sig.histograms["request_preemptions"].count == 4
    assert sig.histograms["prefill_kv_computed_tokens"].buckets[-1][1] == 2
    assert sig.histograms["kv_block_lifetime"].buckets[0] == (1.0, 1.0)
    assert unmapped_families(V033) == set()


def test_a_sleeping_engine_reads_awake_zero():
    text = V033.replace('sleep_state="awake"} 1.0', 'sleep_state="awake"} 0.0')
    assert _signals(text).gauges["engine_awake"].value == 0


def test_every_engine_observation_is_a_signal_playbooks_may_name():
    for text in (V033, vllm_v1_scrape(engines=2, legacy_names=True), SGLANG_0523):
        seen = observe.observe_engine(text.encode(), [], 1000.0, 60.0)
        names = {s for s, _, _ in seen.observations}
        assert names and all(known_signal("engine", s) for s in names), names


SGLANG_0523 = _lines(
    "# TYPE sglang:num_running_reqs gauge",
    'sglang:num_running_reqs{engine_type="unified",model_name="m",tp_rank="0"} 12.0',
    "# TYPE sglang:num_queue_reqs gauge",
    'sglang:num_queue_reqs{engine_type="unified",model_name="m",tp_rank="0"} 3.0',
    "# TYPE sglang:token_usage gauge",
    'sglang:token_usage{engine_type="unified",model_name="m",tp_rank="0"} 0.61',
    "# TYPE sglang:kv_used_tokens gauge",
    'sglang:kv_used_tokens{engine_type="unified",model_name="m",tp_rank="0"} 12500.0',
    "# TYPE sglang:kv_available_tokens gauge",
    'sglang:kv_available_tokens{engine_type="unified",model_name="m",tp_rank="0"} 7980.0',
    "# TYPE sglang:max_total_num_tokens gauge",
    'sglang:max_total_num_tokens{engine_type="unified",model_name="m",tp_rank="0"} 20480.0',
    "# TYPE sglang:num_retracted_reqs gauge",
    'sglang:num_retracted_reqs{engine_type="unified",model_name="m",tp_rank="0"} 1.0',
    "# TYPE sglang:cache_hit_rate gauge",
    'sglang:cache_hit_rate{engine_type="unified",model_name="m",tp_rank="0"} 87.58',
    "# TYPE sglang:is_cuda_graph gauge",
    'sglang:is_cuda_graph{engine_type="unified",model_name="m",tp_rank="0"} 1.0',
    "# TYPE sglang:kv_cache_memory_usage_gb gauge",
    'sglang:kv_cache_memory_usage_gb{engine_type="unified",model_name="m",tp_rank="0"} 0.23',
    "# TYPE sglang:graph_memory_usage_gb gauge",
    'sglang:graph_memory_usage_gb{engine_type="unified",model_name="m",phase="decode",tp_rank="0"}'
    " 0.04",
    'sglang:graph_memory_usage_gb{engine_type="unified",model_name="m",phase="prefill",tp_rank="0"}'
    " 0.02",
    "# TYPE sglang:cuda_graph_passes_total counter",
    'sglang:cuda_graph_passes_total{engine_type="unified",mode="decode_cuda_graph",model_name="m",'
    'tp_rank="0"} 900.0',
    'sglang:cuda_graph_passes_total{engine_type="unified",mode="decode_none",model_name="m",'
    'tp_rank="0"} 30.0',
    'sglang:cuda_graph_passes_total{engine_type="unified",mode="prefill_none",model_name="m",'
    'tp_rank="0"} 70.0',
    "# TYPE sglang:per_stage_req_latency_seconds histogram",
    'sglang:per_stage_req_latency_seconds_bucket{le="0.1",model_name="m",stage="prefill_forward"}'
    " 8.0",
    'sglang:per_stage_req_latency_seconds_bucket{le="+Inf",model_name="m",stage="prefill_forward"}'
    " 10.0",
    'sglang:per_stage_req_latency_seconds_count{model_name="m",stage="prefill_forward"} 10.0',
    'sglang:per_stage_req_latency_seconds_sum{model_name="m",stage="prefill_forward"} 0.9',
    'sglang:per_stage_req_latency_seconds_bucket{le="0.1",model_name="m",stage="tokenize"} 10.0',
    'sglang:per_stage_req_latency_seconds_bucket{le="+Inf",model_name="m",stage="tokenize"} 10.0',
)


def test_sglang_0_5_23_families_and_percent_hit_rate():
    sig = _signals(SGLANG_0523)
    assert sig.flavour == "sglang"
    g = {k: v.value for k, v in sig.gauges.items()}
    assert g["requests_running"] == 12 and g["requests_waiting"] == 3
    assert g["kv_cache_usage"] == 0.61
    assert g["kv_used_tokens"] == 12500 and g["kv_available_tokens"] == 7980
    assert g["kv_capacity_tokens"] == 20480
    assert g["requests_retracted"] == 1
    assert g["cache_hit_rate"] == pytest.approx(0.8758)  # printed as a percentage
    assert g["cuda_graph_in_use"] == 1
    assert g["kv_cache_memory_gb"] == 0.23
    assert g["graph_memory_gb"] == pytest.approx(0.06)  # summed over capture phases
    c = {k: v.value for k, v in sig.counters.items()}
    assert c["cuda_graph_passes_total"] == 900 and c["eager_passes_total"] == 100
    prefill = sig.histograms["prefill_time"]  # the prefill_forward stage only
    assert prefill.count == 10 and prefill.buckets[0] == (0.1, 8.0)
    assert unmapped_families(SGLANG_0523) == set()


def test_sglang_prefix_re_exported_by_a_gateway_and_early_names():
    text = _lines(
        "# TYPE sglang_num_running_reqs gauge",
        'sglang_num_running_reqs{model_name="m"} 4.0',
        "# TYPE sglang_token_usage gauge",
        'sglang_token_usage{model_name="m"} 0.5',
        "# TYPE sglang_queue_req gauge",
        'sglang_queue_req{model_name="m"} 6.0',
    )
    sig = _signals(text)
    assert sig.flavour == "sglang"
    assert sig.gauges["requests_running"].value == 4
    assert sig.gauges["kv_cache_usage"].value == 0.5
    assert sig.gauges["requests_waiting"].value == 6
    assert sig.sources["requests_running"] == "sglang_num_running_reqs"
    early = _lines(
        "# TYPE sglang:num_requests_running gauge",
        'sglang:num_requests_running{name="m"} 2.0',
        "# TYPE sglang:num_requests_waiting gauge",
        'sglang:num_requests_waiting{name="m"} 1.0',
    )
    sig = _signals(early)
    assert sig.gauges["requests_running"].value == 2
    assert sig.gauges["requests_waiting"].value == 1


@pytest.mark.parametrize(
    ("raw", "read"), [("0.9", 0.9), ("90.0", 0.9), ("1.0", 1.0), ("-1.0", None), ("150.0", None)]
)
def test_fraction_gauges_are_normalised_or_left_out(raw, read):
    name = "vllm:gpu_cache_usage_perc"
    text = f'# TYPE {name} gauge\n{name}{{model_name="m"}} {raw}\n'
    sig = _signals(text)
    if read is None:
        assert "kv_cache_usage" not in sig.gauges
    else:
        assert sig.gauges["kv_cache_usage"].value == pytest.approx(read)


def test_v0_prefix_cache_off_is_absent_not_zero():
    text = (
        "# TYPE vllm:gpu_prefix_cache_hit_rate gauge\n"
        'vllm:gpu_prefix_cache_hit_rate{model_name="m"} -1.0\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 0.0\n'
    )
    sig = _signals(text)
    assert "cache_hit_rate" not in sig.gauges and sig.gauges["requests_running"].value == 0


def test_unmapped_families_names_a_new_engine_family():
    text = V033 + _lines(
        "# TYPE vllm:brand_new_thing_total counter",
        'vllm:brand_new_thing_total{engine="0",model_name="m"} 1.0',
        "# TYPE vllm:brand_new_thing_created gauge",
        'vllm:brand_new_thing_created{engine="0",model_name="m"} 1.7e9',
        "# TYPE sglang_new_gauge gauge",
        "sglang_new_gauge 1.0",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 1.0',
    )
    assert unmapped_families(text) == {"vllm:brand_new_thing", "sglang:new_gauge"}


def test_the_simulators_three_formats_are_fully_known(harness_formats):
    for body in harness_formats:
        assert unmapped_families(body) == set()


@pytest.fixture
def harness_formats():
    from enginesim.deployment import Deployment, SimClock
    from enginesim.exposition import sglang, vllm

    bodies = []
    for fmt, render in (("vllm-v1", vllm.render_v1), ("vllm-v0", vllm.render_v0)):
        d = Deployment("healthy", replicas=1, fmt=fmt, seed=0, clock=SimClock("manual"))
        bodies.append(render(d.replicas[0].engine, "0"))
    d = Deployment("healthy", replicas=1, fmt="sglang", seed=0, clock=SimClock("manual"))
    bodies.append(sglang.render(d.replicas[0].engine, "0"))
    return bodies


def test_known_lists_do_not_overlap_with_mapped_names():
    for flavour in FLAVOURS:
        mapped = {base_name(w.name) for spec in flavour.gauges.values() for w in spec.aliases}
        mapped |= {base_name(w.name) for ws in flavour.counters.values() for w in ws}
        mapped |= {base_name(w.name) for ws in flavour.histograms.values() for w in ws}
        assert not mapped & {base_name(n) for f in FLAVOURS for n in f.ignored}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\n\n",
        b"# just a comment\n",
        b'up{job="x"} 1\n',
        b"# TYPE vllm:num_requests_running gauge\n",
    ],
    ids=["empty", "blank lines", "comment", "other exporter", "type only"],
)
def test_unusable_answers_are_probe_errors(body):
    with pytest.raises(EngineScrapeUnusable) as err:
        observe.observe_engine(body, [], 1000.0, 60.0)
    assert f"no {KNOWN_ENGINES} series in the answer" in str(err.value)
    assert err.value.kind == "no-engine-series"


HOSTILE_INFO = [
    'block_size="None",num_gpu_blocks="2048"',
    'block_size="16",num_gpu_blocks="nan"',
    'block_size="16",num_gpu_blocks="1e400"',
    'block_size="-16",num_gpu_blocks="2048"',
    'block_size="16",num_gpu_blocks="0x10"',
    'block_size="' + "9" * 400 + '",num_gpu_blocks="2"',
    'kv_cache_size_tokens="inf",block_size="ab",num_gpu_blocks=""',
]


@pytest.mark.parametrize("labels", HOSTILE_INFO)
def test_hostile_cache_config_info_labels_never_become_a_capacity(labels):
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 1.0\n'
        "# TYPE vllm:cache_config_info gauge\n"
        f"vllm:cache_config_info{{{labels}}} 1.0\n"
    )
    sig = _signals(text)
    capacity = sig.gauges.get("kv_capacity_tokens")
    assert capacity is None or 0 < capacity.value < float("inf")
    assert sig.gauges["requests_running"].value == 1
    require_usable(parse_exposition(text), sig)


def test_messages_name_every_engine_in_the_table():
    """A user pointing an engine target at the wrong port reads which engines Atlas reads."""
    for f in FLAVOURS:
        assert f.engine in KNOWN_ENGINES
    assert KNOWN_ENGINES == "vLLM or SGLang" or KNOWN_ENGINES.count(",") >= 1


def test_base_name_folds_every_alternate_prefix():
    for f in FLAVOURS:
        for alt in f.prefixes[1:]:
            assert base_name(f"{alt}x_total") == base_name(f"{f.prefixes[0]}x")
