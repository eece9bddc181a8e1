"""Engine signals a Prometheus that scrapes the engine stands in for, as PromQL.

Many deployments expose their engines only through Prometheus: Atlas can reach the
Prometheus API but not the replicas' ``/metrics``. The engine's own signals are then
asked of Prometheus under the same names (``kv_cache_usage``, ``preemptions_rate``, ...):
opening an investigation installs these queries on the deployment's Prometheus targets
beside the playbook's own PromQL, backfills their windows from range queries, and the
evaluation reads them when no engine target (nor a log) reported the signal.

The queries read vLLM's V1 metric names (the ones ``probes.parsing.engine`` maps) summed
or maxed over the replicas Prometheus scrapes, in the engine probe's units (fractions,
seconds, per second). Rates and histogram windows span ``RANGE``: two scrapes at the 1 m
default scrape interval, so a rate exists whatever the Prometheus's configuration.
Prometheus answers carry no companions (no bucket bounds, scrape spans or counts), so
the evaluation reads them as it reads a log's stand-ins: the value and its timestamps.

Pure data, no I/O.
"""

from __future__ import annotations

RANGE = "2m"


def _quantile(metric: str, q: float) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket[{RANGE}])))"


def _mean(metric: str) -> str:
    return f"sum(rate({metric}_sum[{RANGE}])) / sum(rate({metric}_count[{RANGE}]))"


STANDS_IN: dict[str, str] = {
    "kv_cache_usage": "max(vllm:kv_cache_usage_perc)",
    "requests_running": "sum(vllm:num_requests_running)",
    "requests_waiting": "sum(vllm:num_requests_waiting)",
    "preemptions_rate": f"sum(rate(vllm:num_preemptions_total[{RANGE}]))",
    "prompt_tokens_rate": f"sum(rate(vllm:prompt_tokens_total[{RANGE}]))",
    "generation_tokens_rate": f"sum(rate(vllm:generation_tokens_total[{RANGE}]))",
    # Finished requests per second: with the token rates, what a request holds in the KV,
    # which the kv-cache-pressure veto needs (unjudged, it holds the confirmation back).
    "e2e_count_rate": f"sum(rate(vllm:e2e_request_latency_seconds_count[{RANGE}]))",
    # First tokens per second: vLLM V1 counts a prompt's tokens as its first token comes
    # out, so the prompt length is prompt tokens per first token, not per finish (in a
    # storm finishes stall and the per-finish ratio swings with them).
    "ttft_count_rate": f"sum(rate(vllm:time_to_first_token_seconds_count[{RANGE}]))",
    # How many requests started (finished) in the range: fewer than a mean needs and the
    # evaluation reads the lengths since start below instead of the range's anecdote.
    "ttft_window_count": f"sum(increase(vllm:time_to_first_token_seconds_count[{RANGE}]))",
    "e2e_window_count": f"sum(increase(vllm:e2e_request_latency_seconds_count[{RANGE}]))",
    # Lengths since the engines started (probes.observe.lifetime_lengths), from the raw
    # counters, summed over the replicas: what the running requests hold when a leak or a
    # storm leaves a range with no starts or finishes of its own.
    "prompt_tokens_per_request": (
        "sum(vllm:prompt_tokens_total) / sum(vllm:time_to_first_token_seconds_count)"
    ),
    "output_tokens_per_request": (
        "sum(vllm:generation_tokens_total) / sum(vllm:e2e_request_latency_seconds_count)"
    ),
    "ttft_p95": _quantile("vllm:time_to_first_token_seconds", 0.95),
    "queue_time_p95": _quantile("vllm:request_queue_time_seconds", 0.95),
    "itl_p99": _quantile("vllm:inter_token_latency_seconds", 0.99),
    "prefill_time_mean": _mean("vllm:request_prefill_time_seconds"),
}
