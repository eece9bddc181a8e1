"""vLLM /metrics: V1 (0.33 names, labels model_name + engine, `_created`) and V0 naming.

Names, HELP text and buckets follow engine-metrics.md §1.3/§1.4; where the reference elides a
HELP text, the completion is marked below as not verified.
"""

from __future__ import annotations

from enginesim.exposition.text import Writer

V1_HELP = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    # Completion not verified (the reference elides the tail).
    "vllm:engine_sleep_state": "Engine sleep state; awake = 0 means engine is sleeping; "
    "awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; "
    "discard_all = 1 means sleep level 2.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:prompt_tokens_by_source": "Number of prompt tokens by source.",
    "vllm:prompt_tokens_cached": "Number of cached prompt tokens (local + external).",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    # Completion not verified.
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested "
    "generation tokens.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
    # Completion not verified.
    "vllm:request_prefill_kv_computed_tokens": "Histogram of new KV tokens computed during "
    "prefill (excluding cached tokens).",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:request_time_per_output_token_seconds": "Histogram of time_per_output_token_seconds "
    "per request.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_num_preemptions": "Histogram of the number of times a request was preempted.",
    "vllm:cache_config_info": "Information of the LLMEngine CacheConfig",
}

V0_HELP = {
    "vllm:num_requests_running": "Number of requests currently running on GPU.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:num_requests_swapped": "Number of requests swapped to CPU.",
    "vllm:gpu_cache_usage_perc": "GPU KV-cache usage. 1 means 100 percent usage.",
    "vllm:cpu_cache_usage_perc": "CPU KV-cache usage. 1 means 100 percent usage.",
    "vllm:gpu_prefix_cache_hit_rate": "GPU prefix cache block hit rate.",
    "vllm:cpu_prefix_cache_hit_rate": "CPU prefix cache block hit rate.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:iteration_tokens_total": "Histogram of number of tokens per engine_step.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:time_per_output_token_seconds": "Histogram of time per output token in seconds.",
    "vllm:e2e_request_latency_seconds": "Histogram of end to end request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_inference_time_seconds": "Histogram of time spent in RUNNING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
    "vllm:request_prompt_tokens": "Number of prefill tokens processed.",
    "vllm:request_generation_tokens": "Number of generation tokens processed.",
    "vllm:request_max_num_generation_tokens": "Histogram of maximum number of requested "
    "generation tokens.",
    "vllm:request_params_n": "Histogram of the n request parameter.",
    "vllm:request_params_max_tokens": "Histogram of the max_tokens request parameter.",
}


def render_v1(engine, engine_label: str) -> str:
    """vLLM 0.33 V1 exposition for one engine."""
    m = engine.metrics
    s = engine.sched
    cfg = engine.cfg
    base = (("engine", engine_label), ("model_name", cfg.model_name))
    cr = m.created_unix
    w = Writer(created=True)
    H = V1_HELP
    w.gauge("vllm:num_requests_running", H["vllm:num_requests_running"], [(base, len(s.running))])
    w.gauge("vllm:num_requests_waiting", H["vllm:num_requests_waiting"], [(base, s.num_waiting)])
    w.gauge(
        "vllm:engine_sleep_state",
        H["vllm:engine_sleep_state"],
        [
            ((*base, ("sleep_state", "awake")), 1),
            ((*base, ("sleep_state", "weights_offloaded")), 0),
            ((*base, ("sleep_state", "discard_all")), 0),
        ],
    )
    w.gauge("vllm:kv_cache_usage_perc", H["vllm:kv_cache_usage_perc"], [(base, s.kv_usage)])
    w.counter(
        "vllm:prefix_cache_queries", H["vllm:prefix_cache_queries"], [(base, s.prefix_queries)], cr
    )
    w.counter("vllm:prefix_cache_hits", H["vllm:prefix_cache_hits"], [(base, s.prefix_hits)], cr)
    w.counter("vllm:num_preemptions", H["vllm:num_preemptions"], [(base, m.num_preemptions)], cr)
    w.counter("vllm:prompt_tokens", H["vllm:prompt_tokens"], [(base, m.prompt_tokens)], cr)
    w.counter(
        "vllm:prompt_tokens_by_source",
        H["vllm:prompt_tokens_by_source"],
        [
            ((*base, ("source", "local_compute")), m.prompt_tokens - m.prompt_tokens_cached),
            ((*base, ("source", "local_cache_hit")), m.prompt_tokens_cached),
            ((*base, ("source", "external_kv_transfer")), 0),
        ],
        cr,
    )
    w.counter(
        "vllm:prompt_tokens_cached",
        H["vllm:prompt_tokens_cached"],
        [(base, m.prompt_tokens_cached)],
        cr,
    )
    w.counter(
        "vllm:generation_tokens", H["vllm:generation_tokens"], [(base, m.generation_tokens)], cr
    )
    w.counter(
        "vllm:request_success",
        H["vllm:request_success"],
        [((*base, ("finished_reason", k)), v) for k, v in m.success.items()],
        cr,
    )
    for name, h in (
        ("vllm:iteration_tokens_total", m.iteration_tokens),
        ("vllm:request_prompt_tokens", m.request_prompt_tokens),
        ("vllm:request_generation_tokens", m.request_generation_tokens),
        ("vllm:request_max_num_generation_tokens", m.request_max_num_generation_tokens),
        ("vllm:request_params_n", m.request_params_n),
        ("vllm:request_params_max_tokens", m.request_params_max_tokens),
        ("vllm:request_prefill_kv_computed_tokens", m.request_prefill_kv_computed_tokens),
        ("vllm:time_to_first_token_seconds", m.ttft),
        ("vllm:inter_token_latency_seconds", m.itl),
        ("vllm:request_time_per_output_token_seconds", m.request_tpot),
        ("vllm:e2e_request_latency_seconds", m.e2e),
        ("vllm:request_queue_time_seconds", m.queue_time),
        ("vllm:request_inference_time_seconds", m.inference_time),
        ("vllm:request_prefill_time_seconds", m.prefill_time),
        ("vllm:request_decode_time_seconds", m.decode_time),
        ("vllm:request_num_preemptions", m.request_num_preemptions),
    ):
        w.histogram(name, H[name], [(base, h)], cr)
    info = (
        ("block_size", str(cfg.block_size)),
        ("cache_dtype", "auto"),
        ("enable_prefix_caching", str(cfg.enable_prefix_caching)),
        ("engine", engine_label),
        ("gpu_memory_utilization", "0.9"),
        ("kv_cache_size_tokens", str(s.total_blocks * cfg.block_size)),
        ("num_cpu_blocks", "None"),
        ("num_gpu_blocks", str(s.total_blocks)),
        ("prefix_caching_hash_algo", "sha256"),
        ("sliding_window", "None"),
    )
    w.gauge("vllm:cache_config_info", H["vllm:cache_config_info"], [(info, 1)])
    return w.text()


def render_v0(engine, engine_label: str) -> str:
    """Legacy V0 naming: model_name label only, no `_created`, TPOT instead of ITL."""
    m = engine.metrics
    s = engine.sched
    cfg = engine.cfg
    base = (("model_name", cfg.model_name),)
    w = Writer(created=False)
    H = V0_HELP
    w.gauge("vllm:num_requests_running", H["vllm:num_requests_running"], [(base, len(s.running))])
    w.gauge("vllm:num_requests_waiting", H["vllm:num_requests_waiting"], [(base, s.num_waiting)])
    w.gauge("vllm:num_requests_swapped", H["vllm:num_requests_swapped"], [(base, 0)])
    w.gauge("vllm:gpu_cache_usage_perc", H["vllm:gpu_cache_usage_perc"], [(base, s.kv_usage)])
    w.gauge("vllm:cpu_cache_usage_perc", H["vllm:cpu_cache_usage_perc"], [(base, 0.0)])
    hit = (
        (s.prefix_hits / s.prefix_queries)
        if (cfg.enable_prefix_caching and s.prefix_queries)
        else -1.0
    )
    w.gauge("vllm:gpu_prefix_cache_hit_rate", H["vllm:gpu_prefix_cache_hit_rate"], [(base, hit)])
    w.gauge("vllm:cpu_prefix_cache_hit_rate", H["vllm:cpu_prefix_cache_hit_rate"], [(base, -1.0)])
    w.counter("vllm:num_preemptions", H["vllm:num_preemptions"], [(base, m.num_preemptions)])
    w.counter("vllm:prompt_tokens", H["vllm:prompt_tokens"], [(base, m.prompt_tokens)])
    w.counter("vllm:generation_tokens", H["vllm:generation_tokens"], [(base, m.generation_tokens)])
    w.counter(
        "vllm:request_success",
        H["vllm:request_success"],
        [((*base, ("finished_reason", k)), v) for k, v in m.success.items() if k != "repetition"],
    )
    for name, h in (
        ("vllm:iteration_tokens_total", m.iteration_tokens),
        ("vllm:time_to_first_token_seconds", m.ttft),
        ("vllm:time_per_output_token_seconds", m.itl),
        ("vllm:e2e_request_latency_seconds", m.e2e),
        ("vllm:request_queue_time_seconds", m.queue_time),
        ("vllm:request_inference_time_seconds", m.inference_time),
        ("vllm:request_prefill_time_seconds", m.prefill_time),
        ("vllm:request_decode_time_seconds", m.decode_time),
        ("vllm:request_prompt_tokens", m.request_prompt_tokens),
        ("vllm:request_generation_tokens", m.request_generation_tokens),
        ("vllm:request_max_num_generation_tokens", m.request_max_num_generation_tokens),
        ("vllm:request_params_n", m.request_params_n),
        ("vllm:request_params_max_tokens", m.request_params_max_tokens),
    ):
        w.histogram(name, H[name], [(base, h)])
    return w.text()
