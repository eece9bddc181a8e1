"""SGLang /metrics (0.5.23 names, engine-metrics.md §2) and /server_info JSON.

SGLang runs prometheus_client in multiprocess mode: no `_created`, `_sum` before buckets.
HELP texts are not in the reference (except the old sample's); they are marked unverified.
"""

from __future__ import annotations

from typing import Any

from enginesim.config import GiB
from enginesim.exposition.text import Writer

SGLANG_VERSION = "0.5.23"


def _sched_labels(model: str) -> tuple[tuple[str, str], ...]:
    return (
        ("engine_type", "unified"),
        ("model_name", model),
        ("moe_ep_rank", "0"),
        ("pp_rank", "0"),
        ("tp_rank", "0"),
    )


def render(engine, engine_label: str) -> str:
    m = engine.metrics
    s = engine.sched
    cfg = engine.cfg
    model = cfg.model_name
    sl = _sched_labels(model)
    tl = (("engine_type", "unified"), ("is_streaming", "true"), ("model_name", model))
    total_tokens = s.total_blocks * cfg.block_size
    used_tokens = s.used_blocks * cfg.block_size
    w = Writer(created=False, multiprocess=True)
    # Tokenizer-side counters.
    w.counter(
        "sglang:prompt_tokens", "Number of prefill tokens processed.", [(tl, m.prompt_tokens)]
    )
    w.counter(
        "sglang:generation_tokens",
        "Number of generation tokens processed.",
        [(tl, m.generation_tokens)],
    )
    w.counter(
        "sglang:cached_tokens",
        "Number of cached prompt tokens.",
        [((*tl, ("cache_source", "device")), m.prompt_tokens_cached)],
    )
    w.counter("sglang:num_requests", "Number of requests processed.", [(tl, m.num_requests)])
    w.counter("sglang:num_aborted_requests", "Number of requests aborted.", [(tl, m.aborted)])
    # Scheduler gauges.
    g = [
        ("sglang:num_running_reqs", "The number of running requests.", len(s.running)),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", s.num_waiting),
        (
            "sglang:num_grammar_queue_reqs",
            "The number of requests in the grammar waiting queue.",
            0,
        ),
        (
            "sglang:gen_throughput",
            "The generation throughput (token/s).",
            engine.last_gen_throughput,
        ),
        (
            "sglang:cache_hit_rate",
            "The prefix cache hit rate.",
            (s.prefix_hits / s.prefix_queries) if s.prefix_queries else 0.0,
        ),
        ("sglang:token_usage", "The token usage.", s.kv_usage),
        ("sglang:num_used_tokens", "The number of used tokens.", used_tokens),
        ("sglang:kv_used_tokens", "The number of KV tokens in use.", used_tokens),
        (
            "sglang:kv_available_tokens",
            "The number of available KV tokens.",
            total_tokens - used_tokens,
        ),
        (
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            total_tokens,
        ),
        ("sglang:context_len", "The context length.", cfg.max_model_len),
        (
            "sglang:num_retracted_reqs",
            "The number of retracted requests in the last batch.",
            engine.last_retracted,
        ),
        ("sglang:num_paused_reqs", "The number of paused requests.", 0),
        (
            "sglang:is_cuda_graph",
            "Whether the batch is using CUDA graph.",
            1.0 if engine.last_step_graph else 0.0,
        ),
        (
            "sglang:weight_memory_usage_gb",
            "Weight memory usage in GB.",
            engine.c.weights_bytes_per_rank / GiB,
        ),
        (
            "sglang:kv_cache_memory_usage_gb",
            "KV cache memory usage in GB.",
            engine.c.kv_budget_bytes_per_rank / GiB,
        ),
    ]
    for name, help_, v in g:
        w.gauge(name, help_, [(sl, float(v))])
    w.gauge(
        "sglang:graph_memory_usage_gb",
        "CUDA graph memory usage in GB.",
        [((*sl, ("phase", "decode")), engine.gpu.mem.graph_pool_bytes / GiB)],
    )
    w.counter(
        "sglang:num_retracted_requests",
        "Total number of retracted requests.",
        [(sl, m.num_preemptions)],
    )
    w.counter(
        "sglang:num_retracted_input_tokens",
        "Total number of input tokens of retracted requests.",
        [(sl, s.retracted_input_tokens)],
    )
    w.counter(
        "sglang:num_retracted_output_tokens",
        "Total number of output tokens of retracted requests.",
        [(sl, s.retracted_output_tokens)],
    )
    w.counter(
        "sglang:cuda_graph_passes",
        "Number of forward passes by CUDA graph mode.",
        [((*sl, ("mode", k)), v) for k, v in m.graph_passes.items()],
    )
    w.histogram(
        "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", [(sl, m.queue_time)]
    )
    w.histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        [(tl, m.ttft)],
    )
    w.histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        [(tl, m.itl)],
    )
    w.histogram(
        "sglang:request_time_per_output_token_seconds",
        "Histogram of time per output token in seconds, per request.",
        [(tl, m.request_tpot)],
    )
    w.histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        [(tl, m.e2e)],
    )
    return w.text()


def server_info(engine, port: int) -> dict[str, Any]:
    """`/server_info` (alias `/get_server_info`): server args + scheduler info + internal_states."""
    cfg = engine.cfg
    c = engine.c
    s = engine.sched
    total_tokens = s.total_blocks * cfg.block_size
    args = {
        "model_path": cfg.model_name,
        "served_model_name": cfg.model_name,
        "tp_size": c.tp_size,
        "dp_size": 1,
        "port": port,
        "host": "127.0.0.1",
        "chunked_prefill_size": cfg.max_num_batched_tokens if cfg.enable_chunked_prefill else -1,
        "max_prefill_tokens": cfg.max_num_batched_tokens,
        "max_running_requests": cfg.max_num_seqs,
        "context_length": cfg.max_model_len,
        "page_size": cfg.block_size,
        "disable_radix_cache": not cfg.enable_prefix_caching,
        "disable_cuda_graph": cfg.enforce_eager,
        "cuda_graph_bs": list(cfg.capture_sizes),
        "schedule_policy": "fcfs",
        "enable_metrics": True,
    }
    state = {
        **args,
        "world_size": c.tp_size,
        "startup_time": engine.metrics.created_unix,
        "effective_max_running_requests_per_dp": cfg.max_num_seqs,
        "last_gen_throughput": engine.last_gen_throughput,
        "memory_usage": {
            "weight": round(c.weights_bytes_per_rank / GiB, 2),
            "kvcache": round(c.kv_budget_bytes_per_rank / GiB, 2),
            "startup_available": round(
                (c.device_total_bytes - c.weights_bytes_per_rank - c.non_torch_bytes) / GiB, 2
            ),
            "token_capacity": total_tokens,
            "token_capacity_swa": None,
            "graph": {"decode": round(engine.gpu.mem.graph_pool_bytes / GiB, 2)},
        },
        "decode_cuda_graph_bs": [x for x in cfg.capture_sizes if x <= cfg.max_num_seqs],
        "num_running_reqs": len(s.running),
        "num_waiting_reqs": s.num_waiting,
        "token_usage": round(s.kv_usage, 4),
    }
    return {
        **args,
        "launch_command": f"python -m sglang.launch_server --model-path {cfg.model_name} "
        f"--tp {c.tp_size} --port {port} --enable-metrics",
        "status": "ready" if engine.is_up else "starting",
        "max_total_num_tokens": total_tokens,
        "max_req_input_len": cfg.max_model_len - 1,
        "kv_events": None,
        "startup_time": engine.metrics.created_unix,
        "internal_states": [state],
        "version": SGLANG_VERSION,
        "frontend": "python",
    }
