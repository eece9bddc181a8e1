"""Engine flavour detection and canonical signals from one parsed scrape.

Evaluation code reasons about "KV-cache usage" or "TTFT", not about which vLLM or SGLang
release renamed what; this module is the one place that knows the wire names
(reference/engine-metrics.md §1.3-1.5, §2.3; engine-metrics-2026.md), through one
flavour table (:data:`FLAVOURS`): how each flavour is recognised, and for every canonical
key the wire families that carry it, newest name first (the first alias present wins; the
wire family used is in ``sources``). docs/inputs-metrics.md lists them per version.

Flavours:
  ``sglang``   ``sglang:`` names (or ``sglang_``, as some gateways re-export them).
  ``vllm-v1``  ``vllm:`` names and any V1 marker: the ``engine`` label (0.9+), a family
               only V1 emits (``prefix_cache_*`` / ``gpu_prefix_cache_*`` counters,
               ``kv_cache_usage_perc``, ``inter_token_latency_seconds``, the 0.13-0.33
               families), or a ``_created`` series (V0 disabled them). V1 0.7-0.8 has no
               ``engine`` label and is still V1.
  ``vllm-v0``  ``vllm:`` names without any V1 marker.
  ``trtllm``   ``trtllm_`` (or ``trtllm:``) names: TensorRT-LLM as NVIDIA Dynamo exports it.
  ``unknown``  anything else (a dcgm-exporter scrape, a proxy's own metrics).

Canonical keys: gauges (``GaugeSignal``, ``value`` aggregated, ``per_rank`` kept for
straggler analysis), counters (``CounterSignal``, cumulative; take ``windowed.rate``
over consecutive scrapes) and histograms (``HistogramSignal``; bucket bounds are READ
FROM THE SCRAPE, never assumed). An alias may select series by label value
(``num_requests_waiting_by_reason{reason="capacity"}``). Fraction gauges (KV usage, cache
hit rate) are normalised: a value in (1, 100] is a percentage (some SGLang versions
report ``cache_hit_rate`` 87.58), anything above 100 or below 0 (V0's -1 "prefix caching
off") is left out. ``cache_config_info``'s labels give the engine's own KV capacity.

Aggregation is deliberate. Series are grouped by *replica* (``engine`` / ``dp_rank``) and by
their other labels (``finished_reason``, ``is_streaming``, ...). Series that differ only in
``tp_rank``/``pp_rank``/``moe_ep_rank``/``pid`` describe the same scheduler (SGLang with
``--enable-metrics-for-all-schedulers``, multiprocess exposition), so within a group they
are collapsed (max for numbers, lowest rank for histograms) before aggregating across
groups; summing them would double-count. ``per_rank`` keeps every series with its rank
labels. Histogram groups that failed validation in the parser never reach a signal; ranks
whose bucket bounds differ are not merged (reported in ``problems``).

A scrape from which nothing can be read is not an idle engine: :func:`require_usable`
raises :class:`EngineScrapeUnusable`, which the poll records as a probe error the user sees.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from probes.parsing.engine_names import SGLANG_IGNORED, VLLM_IGNORED
from probes.parsing.exposition import (
    Exposition,
    ExpositionError,
    HistogramSeries,
    Labels,
    Sample,
    parse_exposition,
)
from probes.parsing.sglang_info import budget_values as sglang_budget_values

__all__ = [
    "FLAVOURS",
    "KNOWN_ENGINES",
    "CounterSignal",
    "EngineScrapeUnusable",
    "EngineSignals",
    "Flavour",
    "GaugeSignal",
    "HistogramSignal",
    "InfoEndpoint",
    "Wire",
    "base_name",
    "detect_flavour",
    "engine_name",
    "engine_signals",
    "flavour_of",
    "require_usable",
    "unmapped_families",
]

VLLM_V1 = "vllm-v1"
VLLM_V0 = "vllm-v0"
SGLANG = "sglang"
TRTLLM = "trtllm"
UNKNOWN = "unknown"

REPLICA_LABELS = ("engine", "dp_rank")
RANK_LABELS = ("engine", "dp_rank", "tp_rank", "pp_rank", "moe_ep_rank")
_MODEL_LABELS = ("model_name", "name")
# Labels that never split a signal: the model, ranks, and the multiprocess writer's pid.
_IGNORED = frozenset((*_MODEL_LABELS, *RANK_LABELS, "pid"))
_SUFFIXES = ("_bucket", "_count", "_sum", "_created")


@dataclass(frozen=True, slots=True)
class Wire:
    """One wire family, optionally only its series whose labels take the given values."""

    name: str
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def keeps(self, labels: Labels) -> bool:
        for key, values in self.where:
            if next((v for k, v in labels if k == key), None) not in values:
                return False
        return True


def _w(name: str, **where: str | tuple[str, ...]) -> Wire:
    return Wire(name, tuple((k, (v,) if isinstance(v, str) else v) for k, v in where.items()))


def _ws(*names: str) -> tuple[Wire, ...]:
    return tuple(Wire(n) for n in names)


@dataclass(frozen=True, slots=True)
class GaugeSpec:
    how: str  # max | min | sum over replicas
    aliases: tuple[Wire, ...]
    fraction: bool = False  # a 0-1 value some versions print as a percentage


@dataclass(frozen=True, slots=True)
class InfoEndpoint:
    """An engine's own configuration endpoint beside /metrics (SGLang ``/server_info``).

    ``target_kind`` is the probe kind that polls it (a ``probes.models.TargetKind`` value,
    named by string so this module stays Django-free); ``budget`` turns the snapshot that
    probe stored into plain budget values (``probes.reported`` merges them), so budget
    discovery is looked up per flavour rather than switched on an engine name.
    """

    target_kind: str
    budget: Callable[[Mapping[str, Any]], dict[str, float | str]]
    # Where it answers beside /metrics, for reading an engine before any target exists
    # (``probes.engine_discovery``).
    path: str = "/server_info"


@dataclass(frozen=True)
class Flavour:
    """One engine flavour: how to recognise it, and its wire names per canonical key.

    Everything the product knows about an engine's /metrics is here, so a new engine is
    one entry in :data:`FLAVOURS` (plus its ignored names and, if it has one, its info
    endpoint's parser) and callers look it up instead of branching on its name.
    """

    key: str
    engine: str  # what the user reads in an error: "vLLM", "SGLang"
    prefixes: tuple[str, ...]  # the first is canonical; the others are folded into it
    detect: Callable[[Exposition], bool]
    gauges: Mapping[str, GaugeSpec]
    counters: Mapping[str, tuple[Wire, ...]]
    histograms: Mapping[str, tuple[Wire, ...]]
    ignored: frozenset[str] = field(default_factory=frozenset)
    # cache_config_info-style families whose labels carry numbers: family -> {label: key}
    info: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    info_endpoint: InfoEndpoint | None = None


# --- vLLM (V0 0.4-0.10, V1 0.7-0.33: one name table; detection tells the two apart) ------

_VLLM_GAUGES = {
    "kv_cache_usage": GaugeSpec(
        "max", _ws("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), fraction=True
    ),
    "requests_running": GaugeSpec("sum", _ws("vllm:num_requests_running")),
    "requests_waiting": GaugeSpec("sum", _ws("vllm:num_requests_waiting")),
    "requests_waiting_capacity": GaugeSpec(
        "sum", (_w("vllm:num_requests_waiting_by_reason", reason="capacity"),)
    ),
    "requests_deferred": GaugeSpec(
        "sum", (_w("vllm:num_requests_waiting_by_reason", reason="deferred"),)
    ),
    "requests_swapped": GaugeSpec("sum", _ws("vllm:num_requests_swapped")),
    # V0 only: -1.0 when prefix caching is off (left out as "below 0").
    "cache_hit_rate": GaugeSpec("max", _ws("vllm:gpu_prefix_cache_hit_rate"), fraction=True),
    # 1 on the series of the current state; awake = 0 means the engine sleeps.
    "engine_awake": GaugeSpec("min", (_w("vllm:engine_sleep_state", sleep_state="awake"),)),
}
_VLLM_COUNTERS = {
    # Wire names end in _total whether the code name did (V0, V1 <0.9) or not (V1 0.9+).
    "preemptions_total": _ws("vllm:num_preemptions_total"),
    "prompt_tokens_total": _ws("vllm:prompt_tokens_total"),
    "generation_tokens_total": _ws("vllm:generation_tokens_total"),
    "requests_finished_total": _ws("vllm:request_success_total"),
    "admission_rejections_total": _ws("vllm:admission_rejections_total"),
    "prefix_cache_queries_total": _ws(
        "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"
    ),
    "prefix_cache_hits_total": _ws(
        "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"
    ),
    "prompt_tokens_cached_total": _ws("vllm:prompt_tokens_cached_total"),
    "prompt_tokens_computed_total": (
        _w("vllm:prompt_tokens_by_source_total", source="local_compute"),
    ),
    "prompt_tokens_cache_hit_total": (
        _w("vllm:prompt_tokens_by_source_total", source="local_cache_hit"),
    ),
    "prompt_tokens_transferred_total": (
        _w("vllm:prompt_tokens_by_source_total", source="external_kv_transfer"),
    ),
    # --enable-mfu-metrics (0.33)
    "estimated_flops_total": _ws("vllm:estimated_flops_per_gpu_total"),
    "estimated_read_bytes_total": _ws("vllm:estimated_read_bytes_per_gpu_total"),
    "estimated_write_bytes_total": _ws("vllm:estimated_write_bytes_per_gpu_total"),
}
_VLLM_HISTOGRAMS = {
    "ttft": _ws("vllm:time_to_first_token_seconds"),
    "itl": _ws("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": _ws("vllm:e2e_request_latency_seconds"),
    "queue_time": _ws("vllm:request_queue_time_seconds", "vllm:time_in_queue_requests"),
    "prefill_time": _ws("vllm:request_prefill_time_seconds"),
    "decode_time": _ws("vllm:request_decode_time_seconds"),
    # Tokens per engine step (V0): a histogram although the name ends in _total.
    "iteration_tokens": _ws("vllm:iteration_tokens_total"),
    "request_preemptions": _ws("vllm:request_num_preemptions"),
    "prefill_kv_computed_tokens": _ws("vllm:request_prefill_kv_computed_tokens"),
    # --kv-cache-metrics (sampled)
    "kv_block_lifetime": _ws("vllm:kv_block_lifetime_seconds"),
    "kv_block_idle_before_evict": _ws("vllm:kv_block_idle_before_evict_seconds"),
    "kv_block_reuse_gap": _ws("vllm:kv_block_reuse_gap_seconds"),
}
_VLLM_INFO = {
    "vllm:cache_config_info": {
        "kv_cache_size_tokens": "kv_capacity_tokens",
        "block_size": "kv_block_size",
        "num_gpu_blocks": "kv_blocks",
        "kv_cache_max_concurrency": "kv_max_concurrency",
    }
}
# V1 observes the same family once per batch of outputs, as the prompt tokens it computed
# for the requests whose *first* token came out plus the tokens generated
# (``IterationStats.prompt_token_stats.computed + num_generation_tokens``, 0.32 loggers):
# a prompt counts whole at its first token, whatever chunks it was prefilled in. A
# 2,048-token engine serving 8,000-token prompts reads 8,000 "per step". Read as tokens
# per step it confirmed oversized chunks on engines chunking as told; it is its own
# signal, an upper bound on the tokens a step carried (it can rule big steps out, never in).
_VLLM_V1_HISTOGRAMS = {
    **{k: v for k, v in _VLLM_HISTOGRAMS.items() if k != "iteration_tokens"},
    "output_batch_tokens": _VLLM_HISTOGRAMS["iteration_tokens"],
}
# Families only a V1 engine emits (any version): with them, no engine label is needed.
V1_ONLY = frozenset(
    (
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:inter_token_latency_seconds",
        "vllm:num_requests_waiting_by_reason",
        "vllm:engine_sleep_state",
        "vllm:request_num_preemptions",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:prompt_tokens_by_source_total",
        "vllm:prompt_tokens_cached_total",
        "vllm:admission_rejections_total",
    )
)

# --- SGLang (Nov 2024 `name` label ... 0.5.23) -------------------------------------------

_SGLANG_GAUGES = {
    "kv_cache_usage": GaugeSpec("max", _ws("sglang:token_usage"), fraction=True),
    # Early metrics PR (sgl-project/sglang#1461) names come second.
    "requests_running": GaugeSpec(
        "sum", _ws("sglang:num_running_reqs", "sglang:num_requests_running")
    ),
    "requests_waiting": GaugeSpec(
        "sum", _ws("sglang:num_queue_reqs", "sglang:num_requests_waiting", "sglang:queue_req")
    ),
    "requests_retracted": GaugeSpec("sum", _ws("sglang:num_retracted_reqs")),
    "gen_throughput": GaugeSpec("sum", _ws("sglang:gen_throughput")),
    "cache_hit_rate": GaugeSpec("max", _ws("sglang:cache_hit_rate"), fraction=True),
    "kv_used_tokens": GaugeSpec("max", _ws("sglang:kv_used_tokens", "sglang:num_used_tokens")),
    "kv_available_tokens": GaugeSpec("min", _ws("sglang:kv_available_tokens")),
    "kv_capacity_tokens": GaugeSpec("min", _ws("sglang:max_total_num_tokens")),
    "cuda_graph_in_use": GaugeSpec("min", _ws("sglang:is_cuda_graph")),
    "kv_cache_memory_gb": GaugeSpec("max", _ws("sglang:kv_cache_memory_usage_gb")),
    "graph_memory_gb": GaugeSpec("sum", _ws("sglang:graph_memory_usage_gb")),  # over phases
}
_SGLANG_COUNTERS = {
    "preemptions_total": _ws("sglang:num_retracted_requests_total"),
    "prompt_tokens_total": _ws("sglang:prompt_tokens_total"),
    "generation_tokens_total": _ws("sglang:generation_tokens_total"),
    "requests_finished_total": _ws("sglang:num_requests_total"),
    "prompt_tokens_cached_total": _ws("sglang:cached_tokens_total"),
    "cuda_graph_passes_total": (
        _w("sglang:cuda_graph_passes_total", mode=("decode_cuda_graph", "prefill_cuda_graph")),
    ),
    "eager_passes_total": (
        _w("sglang:cuda_graph_passes_total", mode=("decode_none", "prefill_none")),
    ),
    "estimated_flops_total": _ws("sglang:estimated_flops_per_gpu_total"),
    "estimated_read_bytes_total": _ws("sglang:estimated_read_bytes_per_gpu_total"),
    "estimated_write_bytes_total": _ws("sglang:estimated_write_bytes_per_gpu_total"),
}
_SGLANG_HISTOGRAMS = {
    "ttft": _ws("sglang:time_to_first_token_seconds"),
    "itl": _ws("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "e2e": _ws("sglang:e2e_request_latency_seconds"),
    "queue_time": _ws("sglang:queue_time_seconds"),
    "prefill_time": (_w("sglang:per_stage_req_latency_seconds", stage="prefill_forward"),),
}


# --- TensorRT-LLM (trtllm-serve 1.1, as NVIDIA Dynamo re-exports it) ---------------------
# Names from reference/engine-metrics-2026.md "Other engines" (ai-dynamo/aiperf, NVIDIA
# docs) and TensorRT-LLM's own MetricsCollector (tensorrt_llm/metrics/collector.py:
# request_success_total{finished_reason}, e2e_request_latency_seconds,
# time_to_first_token_seconds, time_per_output_token_seconds, request_queue_time_seconds;
# labels model_name, engine_type). TensorRT-LLM adds no prefix itself; Dynamo's
# register_engine_metrics_callback adds "trtllm_" (ai-dynamo/dynamo
# docs/backends/trtllm/prometheus.md; earlier docs spell it "trtllm:"). No log format or
# KV-capacity family is sourced yet, so this flavour reads /metrics only.
_TRTLLM_GAUGES = {
    "kv_cache_usage": GaugeSpec("max", _ws("trtllm_kv_cache_utilization"), fraction=True),
    "requests_running": GaugeSpec("sum", _ws("trtllm_num_requests_running")),
    "requests_waiting": GaugeSpec("sum", _ws("trtllm_num_requests_waiting")),
    "cache_hit_rate": GaugeSpec("max", _ws("trtllm_kv_cache_hit_rate"), fraction=True),
}
_TRTLLM_COUNTERS = {
    "requests_finished_total": _ws("trtllm_request_success_total"),
}
_TRTLLM_HISTOGRAMS = {
    "ttft": _ws("trtllm_time_to_first_token_seconds"),
    "itl": _ws("trtllm_time_per_output_token_seconds"),
    "e2e": _ws("trtllm_e2e_request_latency_seconds"),
    "queue_time": _ws("trtllm_request_queue_time_seconds"),
}


def _detect_trtllm(exp: Exposition) -> bool:
    return any(name.startswith(("trtllm_", "trtllm:")) for name in exp.families)


def _has_family(exp: Exposition, names: frozenset[str]) -> bool:
    return any(name in exp.families for name in names)


def _detect_sglang(exp: Exposition) -> bool:
    return any(name.startswith(("sglang:", "sglang_")) for name in exp.families)


def _detect_vllm_v1(exp: Exposition) -> bool:
    vllm = [fam for name, fam in exp.families.items() if name.startswith("vllm:")]
    if not vllm:
        return False
    if _has_family(exp, V1_ONLY):
        return True
    for fam in vllm:
        if fam.name.endswith("_created"):
            return True
        for s in fam.samples:
            for key, _ in s.labels:
                if key == "engine":
                    return True
    return False


def _detect_vllm(exp: Exposition) -> bool:
    return any(name.startswith("vllm:") for name in exp.families)


_VLLM_TABLES: dict[str, Any] = {
    "engine": "vLLM",
    "prefixes": ("vllm:",),
    "gauges": MappingProxyType(_VLLM_GAUGES),
    "counters": MappingProxyType(_VLLM_COUNTERS),
    "histograms": MappingProxyType(_VLLM_HISTOGRAMS),
    "ignored": VLLM_IGNORED,
    "info": MappingProxyType(_VLLM_INFO),
}
# Checked in order: the first flavour whose detector accepts the scrape is it.
FLAVOURS: tuple[Flavour, ...] = (
    Flavour(
        key=TRTLLM,
        engine="TensorRT-LLM",
        prefixes=("trtllm_", "trtllm:"),
        detect=_detect_trtllm,
        gauges=MappingProxyType(_TRTLLM_GAUGES),
        counters=MappingProxyType(_TRTLLM_COUNTERS),
        histograms=MappingProxyType(_TRTLLM_HISTOGRAMS),
    ),
    Flavour(
        key=SGLANG,
        engine="SGLang",
        prefixes=("sglang:", "sglang_"),
        detect=_detect_sglang,
        gauges=MappingProxyType(_SGLANG_GAUGES),
        counters=MappingProxyType(_SGLANG_COUNTERS),
        histograms=MappingProxyType(_SGLANG_HISTOGRAMS),
        ignored=SGLANG_IGNORED,
        info_endpoint=InfoEndpoint("sglang_info", sglang_budget_values),
    ),
    Flavour(
        key=VLLM_V1,
        detect=_detect_vllm_v1,
        **{**_VLLM_TABLES, "histograms": MappingProxyType(_VLLM_V1_HISTOGRAMS)},
    ),
    Flavour(key=VLLM_V0, detect=_detect_vllm, **_VLLM_TABLES),
)
_BY_KEY = {f.key: f for f in FLAVOURS}
# "vLLM or SGLang": the engines a user can point an engine target at, for messages
# (read from the table's end: the broadest detectors sit last, the special ones first).
_ENGINE_NAMES = tuple(dict.fromkeys(f.engine for f in reversed(FLAVOURS)))
KNOWN_ENGINES = (
    " or ".join(_ENGINE_NAMES)
    if len(_ENGINE_NAMES) < 3
    else ", ".join(_ENGINE_NAMES[:-1]) + " or " + _ENGINE_NAMES[-1]
)
# Alternate spellings of a flavour's prefix (``sglang_`` as gateways re-export it).
_RENAMED_PREFIXES = tuple((alt, f.prefixes[0]) for f in FLAVOURS for alt in f.prefixes[1:])


def flavour_of(key: str) -> Flavour | None:
    """The table entry of a detected flavour key (``None`` for ``unknown``)."""
    return _BY_KEY.get(key)


def engine_name(key: str) -> str | None:
    """``"vllm-v1"`` -> ``"vLLM"``: what a user reads for a stored flavour key."""
    found = _BY_KEY.get(key)
    return found.engine if found is not None else None


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

    @property
    def empty(self) -> bool:
        return not (self.gauges or self.counters or self.histograms)


class EngineScrapeUnusable(ExpositionError):
    """The answer parsed, but holds nothing Atlas can read as engine state.

    An empty 200 body, families declared without samples (vLLM mounted without its stat
    logger), or no known engine series: recorded as a probe error, never as an idle engine.
    """

    kind = "no-engine-series"


def detect_flavour(exp: Exposition) -> str:
    """Decide from names and labels only; a scrape has no version header."""
    for flavour in FLAVOURS:
        if flavour.detect(exp):
            return flavour.key
    return UNKNOWN


def base_name(name: str) -> str:
    """``vllm:prompt_tokens_created`` -> ``vllm:prompt_tokens``; ``sglang_x`` -> ``sglang:x``.

    The family a wire name belongs to, whatever sample suffix or counter ``_total`` it
    carries, so known names compare equal across spellings and excerpts cut mid-family.
    """
    for alt, canonical in _RENAMED_PREFIXES:
        if name.startswith(alt):
            name = canonical + name[len(alt) :]
            break
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name.removesuffix("_total")


def _rank(labels: Labels) -> Labels:
    return tuple(p for p in labels if p[0] in RANK_LABELS)


def _group_key(labels: Labels) -> tuple[Labels, Labels]:
    """(replica labels, other labels) — everything but shard, pid and model labels."""
    replica = tuple(p for p in labels if p[0] in REPLICA_LABELS)
    other = tuple(p for p in labels if p[0] not in _IGNORED)
    return replica, other


def _aggregate(values: list[float], how: str) -> float:
    if how == "max":
        return max(values)
    if how == "min":
        return min(values)
    return sum(values)


def _collapse_numbers(samples: tuple[Sample, ...], how: str) -> float:
    """Max within a scheduler's shard copies; then ``how`` across the groups."""
    groups: dict[tuple[Labels, Labels], float] = {}
    for s in samples:
        key = _group_key(s.labels)
        groups[key] = max(groups[key], s.value) if key in groups else s.value
    return _aggregate(list(groups.values()), how)


class _View:
    """Wire-name lookups for one scrape, with the flavour's alternate prefixes folded in."""

    def __init__(self, exp: Exposition, flavour: Flavour) -> None:
        self.exp = exp
        self.renamed: dict[str, str] = {}
        canonical = flavour.prefixes[0]
        for alt in flavour.prefixes[1:]:
            for name in exp.families:
                if name.startswith(alt):
                    self.renamed.setdefault(canonical + name[len(alt) :], name)

    def actual(self, name: str) -> str:
        if name in self.exp.families:
            return name
        return self.renamed.get(name, name)

    def samples(self, wire: Wire) -> tuple[Sample, ...]:
        name = self.actual(wire.name)
        found = self.exp.samples(name)
        if wire.where:
            found = tuple(s for s in found if wire.keeps(s.labels))
        return found

    def histograms(self, wire: Wire) -> tuple[HistogramSeries, ...]:
        found = self.exp.histograms.get(self.actual(wire.name), ())
        if wire.where:
            found = tuple(h for h in found if wire.keeps(h.labels))
        return found


def _first_samples(view: _View, aliases: tuple[Wire, ...]) -> tuple[Wire, tuple[Sample, ...]]:
    for wire in aliases:
        found = view.samples(wire)
        if found:
            return wire, found
    return aliases[0], ()


def _fractions(samples: tuple[Sample, ...], name: str, problems: list[str]) -> tuple[Sample, ...]:
    """0-1 values as they are; a scrape whose values reach past 1 reports percentages."""
    kept = tuple(s for s in samples if not math.isnan(s.value) and s.value >= 0)
    if not kept:
        return ()
    top = max(s.value for s in kept)
    if top > 100:
        problems.append(f"{name}: {top:g} is neither a fraction nor a percentage")
        return ()
    if top > 1:
        return tuple(s._replace(value=s.value / 100) for s in kept)
    return kept


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


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _info_gauges(view: _View, flavour: Flavour, gauges: dict, sources: dict) -> None:
    """``cache_config_info{block_size="16",num_gpu_blocks="2048",...} 1``: the engine's own
    KV capacity. Tokens come from ``kv_cache_size_tokens`` (0.33) or blocks x block size."""
    for family, labels_to_keys in flavour.info.items():
        samples = view.samples(Wire(family))
        per_key: dict[str, list[tuple[Labels, float]]] = {}
        for s in samples:
            have = dict(s.labels)
            values = {key: _number(have.get(label)) for label, key in labels_to_keys.items()}
            if values.get("kv_capacity_tokens") is None:
                blocks, size = values.get("kv_blocks"), values.get("kv_block_size")
                if blocks is not None and size is not None:
                    values["kv_capacity_tokens"] = blocks * size
            for key, value in values.items():
                if value is not None:
                    per_key.setdefault(key, []).append((_rank(s.labels), value))
        for key, points in per_key.items():
            if key in gauges:
                continue
            sources[key] = family
            gauges[key] = GaugeSignal(min(v for _, v in points), tuple(points))


def engine_signals(exp: Exposition) -> EngineSignals:
    """Map one scrape to canonical signals; absent metrics are simply absent keys."""
    key = detect_flavour(exp)
    sources: dict[str, str] = {}
    problems = [f"{p.family}{dict(p.labels)}: {p.reason}" for p in exp.problems]
    gauges: dict[str, GaugeSignal] = {}
    counters: dict[str, CounterSignal] = {}
    histograms: dict[str, HistogramSignal] = {}
    models: set[str] = set()
    flavour = _BY_KEY.get(key)
    if flavour is not None:
        view = _View(exp, flavour)
        for name, spec in flavour.gauges.items():
            wire, samples = _first_samples(view, spec.aliases)
            if spec.fraction:
                samples = _fractions(samples, wire.name, problems)
            if samples:
                sources[name] = view.actual(wire.name)
                per_rank = tuple((_rank(s.labels), s.value) for s in samples)
                gauges[name] = GaugeSignal(_collapse_numbers(samples, spec.how), per_rank)
        _info_gauges(view, flavour, gauges, sources)
        for name, aliases in flavour.counters.items():
            wire, samples = _first_samples(view, aliases)
            if samples:
                sources[name] = view.actual(wire.name)
                per_rank = tuple((_rank(s.labels), s.value) for s in samples)
                counters[name] = CounterSignal(_collapse_numbers(samples, "sum"), per_rank)
        for name, aliases in flavour.histograms.items():
            for wire in aliases:
                series = view.histograms(wire)
                if series:
                    sources[name] = view.actual(wire.name)
                    histograms[name], problem = _merge_histograms(series)
                    if problem:
                        problems.append(f"{wire.name}: {problem}")
                    break
        # Only canonical families: old SGLang's func_latency_seconds uses `name` for a
        # function name, while Nov-2024 SGLang used `name` for the model.
        for name in set(sources.values()):
            fam = exp.families.get(name)
            if name in exp.histograms:  # one label set per series, not per bucket
                label_sets = [h.labels for h in exp.histograms[name]]
            else:
                label_sets = [s.labels for s in fam.samples] if fam is not None else []
            for labels in label_sets:
                found = {k: v for k, v in labels if k in _MODEL_LABELS}
                model = found.get("model_name") or found.get("name")
                if model is not None:
                    models.add(model)
    return EngineSignals(
        flavour=key,
        model_names=tuple(sorted(models)),
        gauges=MappingProxyType(gauges),
        counters=MappingProxyType(counters),
        histograms=MappingProxyType(histograms),
        sources=MappingProxyType(sources),
        problems=tuple(problems),
    )


def require_usable(exp: Exposition, signals: EngineSignals) -> None:
    """Raise :class:`EngineScrapeUnusable` when the answer holds no engine state at all."""
    if not signals.empty:
        return
    if not exp.families:
        raise EngineScrapeUnusable(f"no {KNOWN_ENGINES} series in the answer: the body is empty")
    if not any(f.samples for f in exp.families.values()):
        raise EngineScrapeUnusable(
            f"no {KNOWN_ENGINES} series in the answer: {len(exp.families)} families declared "
            "(HELP/TYPE) without samples (stat logging off or not attached to this server?)"
        )
    found = _BY_KEY.get(signals.flavour)
    if found is None:
        raise EngineScrapeUnusable(f"no {KNOWN_ENGINES} series in the answer")
    detail = "; ".join(signals.problems[:3])
    raise EngineScrapeUnusable(
        f"{found.engine} series in the answer, but none that Atlas reads"
        + (f" ({detail})" if detail else " (partial histograms or only unmapped families)")
    )


def _mapped(flavour: Flavour) -> frozenset[str]:
    names = [w.name for spec in flavour.gauges.values() for w in spec.aliases]
    names += [w.name for aliases in flavour.counters.values() for w in aliases]
    names += [w.name for aliases in flavour.histograms.values() for w in aliases]
    names += list(flavour.info)
    return frozenset(base_name(n) for n in names)


_KNOWN = {f.key: _mapped(f) | {base_name(n) for n in f.ignored} for f in FLAVOURS}

# What prometheus_client's default collectors and the API server's HTTP instrumentation
# put beside the engine's families (vLLM 0.32's scrape: 20 of its families).
RUNTIME_FAMILIES = frozenset(
    (
        "python_gc_objects_collected", "python_gc_objects_uncollectable", "python_gc_collections",
        "python_info", "process_virtual_memory_bytes", "process_resident_memory_bytes",
        "process_start_time_seconds", "process_cpu_seconds", "process_open_fds",
        "process_max_fds", "http_requests", "http_request_size_bytes", "http_response_size_bytes",
        "http_request_duration_highr_seconds", "http_request_duration_seconds",
    )
)  # fmt: skip
# Families no flavour reads, by base name: blanked before an engine scrape is parsed
# (``exposition.without_families``). Never one a flavour maps or tells flavours apart by.
UNREAD_FAMILIES: frozenset[str] = (
    RUNTIME_FAMILIES.union(base_name(n) for f in FLAVOURS for n in f.ignored)
    - frozenset().union(*(_mapped(f) for f in FLAVOURS))
    - {base_name(n) for n in V1_ONLY}
)
_ALL_PREFIXES = tuple(p for f in FLAVOURS for p in f.prefixes)


def unmapped_families(scrape: Exposition | bytes | str) -> set[str]:
    """Engine families (any flavour's prefix: ``vllm:``, ``sglang:``, ...) that the table neither
    maps to a signal nor lists as known-and-ignored, by :func:`base_name`.

    Run it on a live scrape of a new engine release: anything it returns is a family
    Atlas would silently drop, and must be mapped or added to ``engine_names``.
    """
    exp = scrape if isinstance(scrape, Exposition) else parse_exposition(scrape)
    known = frozenset().union(*_KNOWN.values())
    return {
        base_name(name)
        for name in exp.families
        if name.startswith(_ALL_PREFIXES) and base_name(name) not in known
    }
