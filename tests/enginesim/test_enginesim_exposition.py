"""Every endpoint's exposition parses, and names/HELP/labels/buckets match engine-metrics.md.

The expected values below are transcribed from the reference tables (§1.3 vLLM V1 0.33, §1.4 V0,
§2.3 SGLang 0.5.23, §3.1 dcgm-exporter default counters).
"""

from __future__ import annotations

import math

import pytest

TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
       20.0, 40.0, 80.0]  # fmt: skip
REQ = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
       240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
ITER = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
TOK_32K = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000]

# wire family name -> (type, verbatim HELP or None where the reference elides it, buckets)
V1 = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches.", None),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed.", None),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage.", None),
    "vllm:prefix_cache_queries": (
        "counter", "Prefix cache queries, in terms of number of queried tokens.", None),
    "vllm:prefix_cache_hits": (
        "counter", "Prefix cache hits, in terms of number of cached tokens.", None),
    "vllm:num_preemptions": ("counter", "Cumulative number of preemption from the engine.", None),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed.", None),
    "vllm:prompt_tokens_by_source": ("counter", "Number of prompt tokens by source.", None),
    "vllm:prompt_tokens_cached": (
        "counter", "Number of cached prompt tokens (local + external).", None),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed.", None),
    "vllm:request_success": ("counter", "Count of successfully processed requests.", None),
    "vllm:iteration_tokens_total": (
        "histogram", "Histogram of number of tokens per engine_step.", ITER),
    "vllm:request_prompt_tokens": ("histogram", "Number of prefill tokens processed.", TOK_32K),
    "vllm:request_generation_tokens": (
        "histogram", "Number of generation tokens processed.", TOK_32K),
    "vllm:request_max_num_generation_tokens": ("histogram", None, TOK_32K),
    "vllm:request_params_n": ("histogram", "Histogram of the n request parameter.",
                              [1, 2, 5, 10, 20]),
    "vllm:request_params_max_tokens": (
        "histogram", "Histogram of the max_tokens request parameter.", TOK_32K),
    "vllm:request_prefill_kv_computed_tokens": ("histogram", None, TOK_32K),
    "vllm:time_to_first_token_seconds": (
        "histogram", "Histogram of time to first token in seconds.", TTFT),
    "vllm:inter_token_latency_seconds": (
        "histogram", "Histogram of inter-token latency in seconds.", ITL),
    "vllm:request_time_per_output_token_seconds": (
        "histogram", "Histogram of time_per_output_token_seconds per request.", ITL),
    "vllm:e2e_request_latency_seconds": (
        "histogram", "Histogram of e2e request latency in seconds.", REQ),
    "vllm:request_queue_time_seconds": (
        "histogram", "Histogram of time spent in WAITING phase for request.", REQ),
    "vllm:request_inference_time_seconds": ("histogram", None, REQ),
    "vllm:request_prefill_time_seconds": ("histogram", None, REQ),
    "vllm:request_decode_time_seconds": ("histogram", None, REQ),
    "vllm:request_num_preemptions": (
        "histogram", "Histogram of the number of times a request was preempted.",
        [1, 2, 3, 4, 5, 10, 20]),
    "vllm:cache_config_info": ("gauge", "Information of the LLMEngine CacheConfig", None),
}  # fmt: skip

V0 = {
    "vllm:num_requests_running": ("gauge", "Number of requests currently running on GPU.", None),
    "vllm:num_requests_waiting": ("gauge", None, None),
    "vllm:num_requests_swapped": ("gauge", None, None),
    "vllm:gpu_cache_usage_perc": ("gauge", "GPU KV-cache usage. 1 means 100 percent usage.", None),
    "vllm:cpu_cache_usage_perc": ("gauge", None, None),
    "vllm:gpu_prefix_cache_hit_rate": ("gauge", None, None),
    "vllm:cpu_prefix_cache_hit_rate": ("gauge", None, None),
    "vllm:num_preemptions": ("counter", None, None),
    "vllm:prompt_tokens": ("counter", None, None),
    "vllm:generation_tokens": ("counter", None, None),
    "vllm:request_success": ("counter", None, None),
    "vllm:iteration_tokens_total": ("histogram", None, ITER),
    "vllm:time_to_first_token_seconds": ("histogram", None, TTFT),
    "vllm:time_per_output_token_seconds": ("histogram", None, ITL),
    "vllm:e2e_request_latency_seconds": ("histogram", None, REQ),
    "vllm:request_queue_time_seconds": ("histogram", None, REQ),
}

SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGLANG_ITL = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
              0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0]  # fmt: skip
SGLANG_E2E = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
              1200, 1800, 2400]  # fmt: skip
SGLANG = {
    "sglang:num_running_reqs": ("gauge", None, None),
    "sglang:num_queue_reqs": ("gauge", None, None),
    "sglang:gen_throughput": ("gauge", None, None),
    "sglang:cache_hit_rate": ("gauge", None, None),
    "sglang:token_usage": ("gauge", None, None),
    "sglang:num_used_tokens": ("gauge", None, None),
    "sglang:max_total_num_tokens": ("gauge", None, None),
    "sglang:is_cuda_graph": ("gauge", "Whether the batch is using CUDA graph.", None),
    "sglang:num_retracted_reqs": ("gauge", None, None),
    "sglang:num_retracted_requests": ("counter", None, None),
    "sglang:num_retracted_input_tokens": ("counter", None, None),
    "sglang:num_retracted_output_tokens": ("counter", None, None),
    "sglang:cuda_graph_passes": ("counter", None, None),
    "sglang:prompt_tokens": ("counter", "Number of prefill tokens processed.", None),
    "sglang:generation_tokens": ("counter", "Number of generation tokens processed.", None),
    "sglang:time_to_first_token_seconds": ("histogram", None, SGLANG_TTFT),
    "sglang:inter_token_latency_seconds": ("histogram", None, SGLANG_ITL),
    "sglang:e2e_request_latency_seconds": ("histogram", None, SGLANG_E2E),
}

DCGM = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (
        "counter", "Total energy consumption since boot (in mJ)."),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", "Total number of PCIe retries."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_RESERVED": ("gauge", "Framebuffer memory reserved (in MiB)."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (
        "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
}  # fmt: skip


def _check(scrape, expected, base_labels):
    fams = scrape.families
    for name, (typ, help_, buckets) in expected.items():
        assert name in fams, f"missing family {name}"
        fam = fams[name]
        assert fam.type == typ, (name, fam.type)
        if help_ is not None:
            assert fam.documentation == help_, name
        assert fam.samples, name
        for s in fam.samples:
            if name == "vllm:cache_config_info":  # CacheConfig fields + engine, no model_name
                assert "engine" in s.labels and "block_size" in s.labels
                continue
            assert base_labels <= set(s.labels), (name, s.labels)
        if buckets is not None:
            les = sorted({float(s.labels["le"]) for s in fam.samples if s.name == f"{name}_bucket"})
            assert les == [float(b) for b in buckets] + [math.inf], name


def test_vllm_v1_names_labels_buckets(harness):
    h = harness("kv-pressure")
    h.advance(200)
    sc = h.scrape()
    _check(sc, V1, {"model_name", "engine"})
    # Counters are exposed with _total and a _created twin (V1 single-process mode).
    assert "vllm:num_preemptions_total" in sc.samples
    assert "vllm:num_preemptions_created" in sc.samples
    assert "vllm:iteration_tokens_total_created" in sc.samples
    created = sc.value("vllm:num_preemptions_created")
    assert created == h.d.epoch_unix  # derived from the simulated epoch, not the wall clock
    reasons = {ls["finished_reason"] for ls, _ in sc.samples["vllm:request_success_total"]}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    assert sc.value("vllm:num_requests_running") > 0
    assert 0.0 <= sc.value("vllm:kv_cache_usage_perc") <= 1.0
    assert sc.value("vllm:time_to_first_token_seconds_count") > 0
    # A histogram's +Inf bucket equals its count.
    inf = sc.buckets("vllm:time_to_first_token_seconds")[-1][1]
    assert inf == sc.value("vllm:time_to_first_token_seconds_count")


def test_vllm_v0_naming(harness):
    h = harness("healthy", fmt="vllm-v0")
    h.advance(60)
    sc = h.scrape()
    _check(sc, V0, {"model_name"})
    assert not any(n.endswith("_created") for n in sc.samples)
    assert "vllm:kv_cache_usage_perc" not in sc.families
    assert "vllm:inter_token_latency_seconds" not in sc.families
    assert all("engine" not in ls for ls, _ in sc.samples["vllm:num_requests_running"])
    assert sc.value("vllm:gpu_prefix_cache_hit_rate") == -1.0  # prefix caching off


def test_sglang_naming_and_server_info(harness):
    import json

    h = harness("kv-pressure", fmt="sglang")
    h.advance(240)
    sc = h.scrape()
    _check(sc, SGLANG, {"model_name", "engine_type"})
    assert not any(n.endswith("_created") for n in sc.samples)
    tp = {ls.get("tp_rank") for ls, _ in sc.samples["sglang:num_running_reqs"]}
    assert tp == {"0"}
    assert sc.value("sglang:num_retracted_requests_total") > 0  # preemption is "retraction"
    # Multiprocess formatting: _sum comes before the buckets.
    text = sc.text
    assert text.index("sglang:time_to_first_token_seconds_sum") < text.index(
        "sglang:time_to_first_token_seconds_bucket"
    )
    for path in ("/server_info", "/get_server_info"):
        info = json.loads(h.get(path))
        assert info["version"] == "0.5.23"
        assert info["max_total_num_tokens"] == 114688
        st = info["internal_states"][0]
        assert st["memory_usage"]["token_capacity"] == 114688
        assert st["effective_max_running_requests_per_dp"] == 40
    logs = h.get("/logs?offset=0").decode()
    assert "KV cache pool is full. Retract requests." in logs


def test_dcgm_per_gpu(harness):
    h = harness("tp-straggler", replicas=2)
    h.advance(30)
    for rep in (0, 1):
        sc = h.scrape(f"/replicas/{rep}/dcgm/metrics")
        for name, (typ, help_) in DCGM.items():
            fam = sc.families[name]
            assert (fam.type, fam.documentation) == (typ, help_), name
            assert len(fam.samples) == 4  # TP4: one series per GPU
            for s in fam.samples:
                assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"} <= set(
                    s.labels
                )
        uuids = {s.labels["UUID"] for s in sc.families["DCGM_FI_DEV_SM_CLOCK"].samples}
        assert len(uuids) == 4 and all(u.startswith("GPU-") for u in uuids)
    # Go %f formatting for doubles.
    text = h.get("/dcgm/metrics").decode()
    assert any(ln.startswith("DCGM_FI_DEV_POWER_USAGE{") and ln.split()[-1].count(".") == 1
               and len(ln.split()[-1].split(".")[1]) == 6 for ln in text.splitlines())  # fmt: skip


def test_router_metrics_endpoint(harness):
    h = harness("router-slow", router_port=0)
    h.advance(30)
    for port in (None, h.srv.ports["router"]):
        path = "/router/metrics" if port is None else "/metrics"
        sc = h.Scrape(h.get(path, port=port).decode())
        fam = sc.families["router_forward_duration_seconds"]
        assert fam.type == "histogram"
        assert sc.value("router_forward_duration_seconds_count") > 0
        p95 = h.window_quantile(0.95, None, sc, "router_forward_duration_seconds")
        assert p95 > 0.02  # router-slow: above the playbook's 20 ms bar


@pytest.mark.parametrize("fmt", ["vllm-v1", "vllm-v0", "sglang"])
def test_every_text_endpoint_parses(harness, fmt):
    h = harness("healthy", replicas=3, fmt=fmt, per_replica_ports=True)
    h.advance(20)
    paths = ["/metrics", "/replicas/1/metrics", "/replicas/2/dcgm/metrics", "/dcgm/metrics",
             "/router/metrics"]  # fmt: skip
    for p in paths:
        sc = h.scrape(p)
        assert sc.families, p
    for port in h.srv.replica_ports:
        assert h.Scrape(h.get("/metrics", port=port).decode()).families
    # Replica identity: V1 engine label follows the replica.
    if fmt == "vllm-v1":
        sc = h.scrape("/replicas/2/metrics")
        assert {ls["engine"] for ls, _ in sc.samples["vllm:num_requests_running"]} == {"2"}
