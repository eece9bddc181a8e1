"""The signals probes record, by source: what a playbook measure may name.

Kept in step with probes/observe.py (a test compares them on real scrapes), so a
typo in a playbook fails when the file loads instead of reading nothing forever.
"""

from __future__ import annotations

import re

SOURCES = ("engine", "sglang_info", "dcgm", "nvml", "prometheus", "log", "artifact")

_HISTOGRAMS = (
    "ttft|itl|e2e|queue_time|prefill_time|decode_time|iteration_tokens|request_preemptions"
    "|prefill_kv_computed_tokens|kv_block_lifetime|kv_block_idle_before_evict|kv_block_reuse_gap"
)
_GAUGES = (
    "kv_cache_usage|requests_(running|waiting|waiting_capacity|deferred|swapped|retracted)"
    "|gen_throughput|cache_hit_rate|engine_awake|kv_capacity_tokens|kv_block_size|kv_blocks"
    "|kv_max_concurrency|kv_used_tokens|kv_available_tokens|cuda_graph_in_use"
    "|kv_cache_memory_gb|graph_memory_gb"
)
_COUNTERS = (
    "preemptions|prompt_tokens|generation_tokens|requests_finished|prefix_cache_queries"
    "|prefix_cache_hits|admission_rejections|prompt_tokens_cached|prompt_tokens_computed"
    "|prompt_tokens_cache_hit|prompt_tokens_transferred|cuda_graph_passes|eager_passes"
    "|estimated_flops|estimated_read_bytes|estimated_write_bytes"
)
_PATTERNS: dict[str, re.Pattern[str]] = {
    # probes/parsing/engine.py's canonical keys as probes/observe.py names them.
    "engine": re.compile(
        rf"^({_GAUGES}|scrape_span_s|({_COUNTERS})_rate"
        rf"|({_HISTOGRAMS})_((p50|p95|p99)(_lo|_hi)?|mean|count_rate|window_count))$"
    ),
    "sglang_info": re.compile(
        r"^sglang_(weight_gb|kvcache_gb|graph_gb|token_capacity|max_running_requests)$"
    ),
    "dcgm": re.compile(r"^gpu_[a-z0-9_]+$"),
    "nvml": re.compile(r"^nvml_[a-z0-9_]+$"),
    "prometheus": re.compile(r"^[a-z][a-z0-9_]{0,47}$"),
    # Besides its own, a log gives the engine signals its stats lines carry
    # (evaluation.LOG_STANDS_IN), read when no engine target reports them.
    "log": re.compile(
        r"^(log_events|log_stats_[a-z0-9_]+|kv_cache_usage|requests_(running|waiting)"
        r"|(preemptions|prompt_tokens|generation_tokens)_rate)$"
    ),
    "artifact": re.compile(r"^artifact_[a-z0-9_]+$"),
}


def known_signal(source: str, signal: str) -> bool:
    pattern = _PATTERNS.get(source)
    return bool(pattern and pattern.match(signal))


# What an engine (or log) signal's value is, for how much data it takes to be evidence
# (evaluation): a counter's rate over the scrapes so far, a histogram window's quantile
# (interpolated inside a bucket) or mean (of however many observations there were), or a
# gauge read as it is. Prometheus answers are read as gauges: its buckets never reach us.
# A profiler artifact's signal is a summary of the whole artifact (its own span), one
# value per upload: not a sample of a window.
SIGNAL_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("rate", re.compile(r"_rate$")),
    ("quantile", re.compile(r"_p[0-9]{2}$")),
    ("mean", re.compile(r"_mean$")),
)
DERIVED_SOURCES = frozenset({"engine", "log"})


def signal_kind(source: str, signal: str) -> str:
    """rate | quantile | mean | summary | gauge."""
    if source == "artifact":
        return "summary"
    if source in DERIVED_SOURCES:
        for kind, pattern in SIGNAL_KINDS:
            if pattern.search(signal):
                return kind
    return "gauge"


def companions(source: str, signal: str) -> dict[str, str]:
    """The signals (by role) that say what a derived value rests on, recorded beside it
    by probes/observe.py: ``span`` (seconds of scrapes behind a rate), ``lo``/``hi`` (the
    bucket a quantile lies in), ``count`` (observations behind a histogram's mean)."""
    if source != "engine":
        return {}
    kind = signal_kind(source, signal)
    if kind == "rate":
        return {"span": "scrape_span_s"}
    if kind == "quantile":
        return {"lo": f"{signal}_lo", "hi": f"{signal}_hi"}
    if kind == "mean":
        return {"count": f"{signal.removesuffix('_mean')}_window_count"}
    return {}
