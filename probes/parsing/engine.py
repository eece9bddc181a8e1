"""Engine flavour detection and canonical signals from one parsed scrape.

Evaluation code reasons about "KV-cache usage" or "TTFT", not about which vLLM or SGLang
release renamed what; this module is the one place that knows the wire names
(reference/engine-metrics.md §1.3-1.5, §2.3).

Flavours: ``vllm-v1`` (any ``vllm:`` series carries the ``engine`` label), ``vllm-v0``
(``vllm:`` without ``engine``), ``sglang`` (``sglang:`` names), ``unknown``.

Canonical keys (first alias present wins; the wire family used is in ``sources``):

Gauges (``GaugeSignal``: ``value`` aggregated, ``per_rank`` kept for straggler analysis)
  kv_cache_usage      fraction 0-1 of the KV pool; MAX over ranks (the fullest rank preempts
                      first). vllm:kv_cache_usage_perc <-> vllm:gpu_cache_usage_perc;
                      sglang:token_usage.
  requests_running    requests in the running batch; SUM over replicas.
                      vllm:num_requests_running; sglang:num_running_reqs.
  requests_waiting    queued requests; SUM. vllm:num_requests_waiting; sglang:num_queue_reqs.
  requests_swapped    V0 swap-mode preemptions in flight; SUM. vllm:num_requests_swapped.
  requests_retracted  SGLang's current retractions; SUM. sglang:num_retracted_reqs.
  gen_throughput      SGLang's own tokens/s estimate; SUM. sglang:gen_throughput.
  cache_hit_rate      SGLang prefix-cache hit rate; MAX. sglang:cache_hit_rate.

Counters (``CounterSignal``, cumulative; take ``windowed.rate`` over consecutive scrapes)
  preemptions_total        vllm:num_preemptions_total; SGLang retractions
                           sglang:num_retracted_requests_total.
  prompt_tokens_total      vllm:prompt_tokens_total; sglang:prompt_tokens_total.
  generation_tokens_total  vllm:generation_tokens_total; sglang:generation_tokens_total.
  requests_finished_total  vllm:request_success_total (all finished_reason);
                           sglang:num_requests_total.
  prefix_cache_queries_total / prefix_cache_hits_total
                           vllm:prefix_cache_{queries,hits}_total <-> vllm:gpu_prefix_cache_*.

Histograms (``HistogramSignal``; bucket bounds are READ FROM THE SCRAPE, never assumed)
  ttft           vllm:time_to_first_token_seconds; sglang:time_to_first_token_seconds.
  itl            vllm:inter_token_latency_seconds <-> vllm:time_per_output_token_seconds;
                 sglang:inter_token_latency_seconds <-> sglang:time_per_output_token_seconds.
  e2e            vllm:e2e_request_latency_seconds; sglang:e2e_request_latency_seconds.
  queue_time     vllm:request_queue_time_seconds (V0 also vllm:time_in_queue_requests);
                 sglang:queue_time_seconds.
  prefill_time   vllm:request_prefill_time_seconds.
  decode_time    vllm:request_decode_time_seconds.
  iteration_tokens  vllm:iteration_tokens_total (tokens per engine step; a histogram even
                 though the name ends in _total).

Aggregation is deliberate. Series are grouped by *replica* (``engine`` / ``dp_rank``) and by
their other labels (``finished_reason``, ``is_streaming``, ...). Series that differ only in
``tp_rank``/``pp_rank``/``moe_ep_rank`` describe the same scheduler (SGLang with
``--enable-metrics-for-all-schedulers``), so within a group they are collapsed (max for
numbers, lowest rank for histograms) before summing across groups; summing them would
double-count. ``per_rank`` keeps every series with its rank labels. Histogram groups that
failed validation in the parser never reach a signal; ranks whose bucket bounds differ are
not merged (reported in ``problems``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from probes.parsing.exposition import Exposition, HistogramSeries, Labels, Sample

__all__ = [
    "CounterSignal",
    "EngineSignals",
    "GaugeSignal",
    "HistogramSignal",
    "detect_flavour",
    "engine_signals",
]

VLLM_V1 = "vllm-v1"
VLLM_V0 = "vllm-v0"
SGLANG = "sglang"
UNKNOWN = "unknown"

REPLICA_LABELS = ("engine", "dp_rank")
RANK_LABELS = ("engine", "dp_rank", "tp_rank", "pp_rank", "moe_ep_rank")
_SHARD_LABELS = frozenset(("tp_rank", "pp_rank", "moe_ep_rank"))
_MODEL_LABELS = ("model_name", "name")
_IGNORED = frozenset((*_MODEL_LABELS, *RANK_LABELS))

# canonical key -> (aggregation, aliases per flavour family prefix)
_GAUGES: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "kv_cache_usage": (
        "max",
        {
            "vllm": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            "sglang": ("sglang:token_usage",),
        },
    ),
    "requests_running": (
        "sum",
        {"vllm": ("vllm:num_requests_running",), "sglang": ("sglang:num_running_reqs",)},
    ),
    "requests_waiting": (
        "sum",
        {"vllm": ("vllm:num_requests_waiting",), "sglang": ("sglang:num_queue_reqs",)},
    ),
    "requests_swapped": ("sum", {"vllm": ("vllm:num_requests_swapped",)}),
    "requests_retracted": ("sum", {"sglang": ("sglang:num_retracted_reqs",)}),
    "gen_throughput": ("sum", {"sglang": ("sglang:gen_throughput",)}),
    "cache_hit_rate": ("max", {"sglang": ("sglang:cache_hit_rate",)}),
}
_COUNTERS: dict[str, dict[str, tuple[str, ...]]] = {
    "preemptions_total": {
        "vllm": ("vllm:num_preemptions_total",),
        "sglang": ("sglang:num_retracted_requests_total",),
    },
    "prompt_tokens_total": {
        "vllm": ("vllm:prompt_tokens_total",),
        "sglang": ("sglang:prompt_tokens_total",),
    },
    "generation_tokens_total": {
        "vllm": ("vllm:generation_tokens_total",),
        "sglang": ("sglang:generation_tokens_total",),
    },
    "requests_finished_total": {
        "vllm": ("vllm:request_success_total",),
        "sglang": ("sglang:num_requests_total",),
    },
    "prefix_cache_queries_total": {
        "vllm": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    },
    "prefix_cache_hits_total": {
        "vllm": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    },
}
_HISTOGRAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "ttft": {
        "vllm": ("vllm:time_to_first_token_seconds",),
        "sglang": ("sglang:time_to_first_token_seconds",),
    },
    "itl": {
        "vllm": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "sglang": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    },
    "e2e": {
        "vllm": ("vllm:e2e_request_latency_seconds",),
        "sglang": ("sglang:e2e_request_latency_seconds",),
    },
    "queue_time": {
        "vllm": ("vllm:request_queue_time_seconds", "vllm:time_in_queue_requests"),
        "sglang": ("sglang:queue_time_seconds",),
    },
    "prefill_time": {"vllm": ("vllm:request_prefill_time_seconds",)},
    "decode_time": {"vllm": ("vllm:request_decode_time_seconds",)},
    "iteration_tokens": {"vllm": ("vllm:iteration_tokens_total",)},
}


@dataclass(frozen=True, slots=True)
class GaugeSignal:
    value: float
    per_rank: tuple[tuple[Labels, float], ...]


@dataclass(frozen=True, slots=True)
class CounterSignal:
    value: float
    per_rank: tuple[tuple[Labels, float], ...]


@dataclass(frozen=True, slots=True)
class HistogramSignal:
    """Merged over replicas (``sum by (le)``) when bounds agree; ``buckets`` is empty if not."""

    buckets: tuple[tuple[float, float], ...]
    count: float | None
    sum: float | None
    per_rank: tuple[tuple[Labels, HistogramSeries], ...]


@dataclass(frozen=True)
class EngineSignals:
    flavour: str
    model_names: tuple[str, ...]
    gauges: Mapping[str, GaugeSignal]
    counters: Mapping[str, CounterSignal]
    histograms: Mapping[str, HistogramSignal]
    sources: Mapping[str, str]
    problems: tuple[str, ...]


def detect_flavour(exp: Exposition) -> str:
    """Decide from names and labels only; a scrape has no version header."""
    vllm = False
    for name, fam in exp.families.items():
        if name.startswith("sglang:"):
            return SGLANG
        if name.startswith("vllm:"):
            vllm = True
            for s in fam.samples:
                for key, _ in s.labels:
                    if key == "engine":
                        return VLLM_V1
    return VLLM_V0 if vllm else UNKNOWN


def _rank(labels: Labels) -> Labels:
    return tuple(p for p in labels if p[0] in RANK_LABELS)


def _group_key(labels: Labels) -> tuple[Labels, Labels]:
    """(replica labels, other labels) — everything but shard and model labels."""
    replica = tuple(p for p in labels if p[0] in REPLICA_LABELS)
    other = tuple(p for p in labels if p[0] not in _IGNORED)
    return replica, other


def _collapse_numbers(samples: tuple[Sample, ...], how: str) -> float:
    groups: dict[tuple[Labels, Labels], float] = {}
    for s in samples:
        key = _group_key(s.labels)
        groups[key] = max(groups[key], s.value) if key in groups else s.value
    values = list(groups.values())
    return max(values) if how == "max" else sum(values)


def _first(exp: Exposition, aliases: tuple[str, ...]) -> str | None:
    for name in aliases:
        if exp.samples(name):
            return name
    return None


def _merge_histograms(series: tuple[HistogramSeries, ...]) -> tuple[HistogramSignal, str | None]:
    chosen: dict[tuple[Labels, Labels], HistogramSeries] = {}
    for h in sorted(series, key=lambda h: h.labels):
        chosen.setdefault(_group_key(h.labels), h)
    per_rank = tuple((_rank(h.labels), h) for h in series)
    bounds = {tuple(b for b, _ in h.buckets) for h in chosen.values()}
    if len(bounds) != 1:
        return HistogramSignal((), None, None, per_rank), "bucket bounds differ across ranks"
    merged = [0.0] * len(next(iter(bounds)))
    count: float | None = 0.0
    total: float | None = 0.0
    for h in chosen.values():
        for i, (_, c) in enumerate(h.buckets):
            merged[i] += c
        count = None if count is None or h.count is None else count + h.count
        total = None if total is None or h.sum is None else total + h.sum
    buckets = tuple(zip(next(iter(bounds)), merged, strict=True))
    return HistogramSignal(buckets, count, total, per_rank), None


def engine_signals(exp: Exposition) -> EngineSignals:
    """Map one scrape to canonical signals; absent metrics are simply absent keys."""
    flavour = detect_flavour(exp)
    prefix = "sglang" if flavour == SGLANG else "vllm"
    sources: dict[str, str] = {}
    problems = [f"{p.family}{dict(p.labels)}: {p.reason}" for p in exp.problems]
    gauges: dict[str, GaugeSignal] = {}
    counters: dict[str, CounterSignal] = {}
    histograms: dict[str, HistogramSignal] = {}
    models: set[str] = set()
    if flavour != UNKNOWN:
        for key, (how, by_flavour) in _GAUGES.items():
            name = _first(exp, by_flavour.get(prefix, ()))
            if name is not None:
                samples = exp.samples(name)
                sources[key] = name
                per_rank = tuple((_rank(s.labels), s.value) for s in samples)
                gauges[key] = GaugeSignal(_collapse_numbers(samples, how), per_rank)
        for key, by_flavour in _COUNTERS.items():
            name = _first(exp, by_flavour.get(prefix, ()))
            if name is not None:
                samples = exp.samples(name)
                sources[key] = name
                per_rank = tuple((_rank(s.labels), s.value) for s in samples)
                counters[key] = CounterSignal(_collapse_numbers(samples, "sum"), per_rank)
        for key, by_flavour in _HISTOGRAMS.items():
            for name in by_flavour.get(prefix, ()):
                series = exp.histograms.get(name)
                if series:
                    sources[key] = name
                    histograms[key], problem = _merge_histograms(series)
                    if problem:
                        problems.append(f"{name}: {problem}")
                    break
        # Only canonical families: old SGLang's func_latency_seconds uses `name` for a
        # function name, while Nov-2024 SGLang used `name` for the model.
        for name in set(sources.values()):
            for fam_name in (name, name + "_bucket", name + "_count"):
                for s in exp.samples(name, fam_name):
                    model = dict(s.labels).get("model_name") or dict(s.labels).get("name")
                    if model is not None:
                        models.add(model)
    return EngineSignals(
        flavour=flavour,
        model_names=tuple(sorted(models)),
        gauges=MappingProxyType(gauges),
        counters=MappingProxyType(counters),
        histograms=MappingProxyType(histograms),
        sources=MappingProxyType(sources),
        problems=tuple(problems),
    )
