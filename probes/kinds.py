"""The probe kinds: one entry per kind of target, and everything the code needs to know
about one.

A kind says what a target of it is called (``value``, stored in ``Target.kind``, and the
``label`` people read), where its observations show up for playbooks (its ``source``,
with the signals that source may name), how it is read (``fetch``: over HTTP by the
shared pollers, as PromQL queries, on the GPU host's own worker, or only on request),
how its fetch URL is built (an offset-following stream adds its offset), how a body
becomes observations (``observe``, a pure function of a :class:`Read`), which form
fields a commander must fill in, and the ``diagnose`` command's option for it.

The poll tasks, ``diagnose``, the observation reads, the target form and the model's
check constraints all read this table instead of branching on the kind, so a new kind
of target is one entry here plus its parser (and the migration Django writes for the
new choice). Django-free: the playbook loader and the evaluation read the signal
vocabulary (``probes.vocabulary``) from it without an app registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from probes import logfile, observe
from probes.observe import Observed
from probes.parsing import nvml_reading
from probes.parsing.exposition import ExpositionError
from probes.parsing.sglang_info import ServerInfoError

# The most bytes one read of a followed log takes (HTTP relay or file on the host).
LOG_READ_LIMIT = 1 << 20


class Fetch(StrEnum):
    """How a kind's targets are read, which decides where the read runs."""

    GET = "get"  # one HTTP GET per cycle by the shared pollers
    PROMQL = "promql"  # the target's PromQL queries, evaluated per cycle by the pollers
    HOST = "host"  # read on the GPU host's own worker (its Celery queue), per cycle
    ON_DEMAND = "on-demand"  # only when someone asks: a trace perturbs the engine
    # Never read: the console writes the target's observations itself (an analysed
    # profiler artifact's signals), so evaluation reads them like any other.
    STORED = "stored"


class Runs(StrEnum):
    """Where a kind's reads run."""

    POLLER = "poller"  # the shared pollers, every cycle (one task per deployment)
    HOST = "host"  # the GPU host's worker, every cycle (one task per target)
    ON_DEMAND = "on-demand"  # on request (artifact collection)
    NOWHERE = "nowhere"  # never polled, never shown as a probe (Fetch.STORED)


class Needs(StrEnum):
    """What a commander must give a target of this kind (the form checks each)."""

    URL = "url"
    HOST_QUEUE = "host_queue"
    PATH = "path"  # an absolute path on the GPU host
    QUERIES = "queries"  # at least one ``name = PromQL`` line


class Values(StrEnum):
    """How a source's values are read as evidence (``vocabulary.signal_kind``)."""

    # A rate, quantile or mean computed over a window of scrapes, told by its suffix;
    # anything else a gauge.
    DERIVED = "derived"
    GAUGE = "gauge"  # read as it is (Prometheus answers: its buckets never reach us)
    SUMMARY = "summary"  # one value summarising a whole artifact, not a window's sample


@dataclass(frozen=True)
class Source:
    """Where observations come from, as a playbook measure names it (``source:``)."""

    name: str
    # The signals its probes record: a playbook naming any other fails when it loads,
    # instead of reading nothing forever (a test compares them on real scrapes).
    signals: re.Pattern[str]
    values: Values = Values.GAUGE
    # Derived values are recorded with what they rest on (span, bucket, count).
    companions: bool = False
    # Labelled series are per-rank detail: the view reads the unlabelled aggregate only
    # (ranks are compared through GPU signals).
    aggregate_only: bool = False
    # Whether the view tags each series with the target it came from. An artifact's
    # series are already one per artifact (``artifact=<id>``); which store holds them
    # says nothing.
    by_target: bool = True


@dataclass(frozen=True)
class Read:
    """One successful read of a target, as its kind's observer sees it.

    ``at`` and ``epoch`` are the same instant, each as the caller already has it (the
    Celery path's cycle, ``diagnose``'s clock), so neither is converted on the way.
    """

    body: Any  # the bytes fetched; NVML's reading; Prometheus's (name, result) answers
    at: datetime
    epoch: float
    window_s: float = 60.0
    # Earlier good snapshots of this target inside the window, oldest first.
    history: Sequence[tuple[float, dict]] = ()
    # The last good snapshot however old (a followed stream continues from it).
    previous: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HostRead:
    """What a host kind read where it runs: ``body`` for its observer, the bytes it took
    (for the probe health strip) and, for a followed file, where the next read starts."""

    body: Any
    size: int | None = None
    next_offset: int | None = None


Observer = Callable[[Read], Observed]
HostReader = Callable[[str, int, Sequence[Path]], HostRead]  # (path, offset, roots)


@dataclass(frozen=True)
class ProbeKind:
    """One kind of probe target (see the module docstring)."""

    value: str
    label: str
    source: Source
    fetch: Fetch
    needs: frozenset[Needs]
    # None for kinds whose reads are not turned into observations by a poll (profiler
    # artifacts are analysed by the artifacts app).
    observe: Observer | None = None
    # Parser errors that mean "the answer was read but is unusable" (a failed poll with
    # the error's ``kind``, "malformed" by default), rather than a bug.
    unusable: tuple[type[ValueError], ...] = ()
    # A stream read in pieces: each read starts at the stored offset and continues the
    # last good poll's snapshot (``Read.previous``).
    follows: bool = False
    # Its observer computes windowed statistics from earlier snapshots (``Read.history``):
    # only these kinds' recent polls are read back each cycle.
    windowed: bool = False
    read_here: HostReader | None = None  # Fetch.HOST only
    option: str | None = None  # the ``diagnose`` command's --option, if it can diagnose it

    @property
    def runs(self) -> Runs:
        if self.fetch in (Fetch.GET, Fetch.PROMQL):
            return Runs.POLLER
        if self.fetch is Fetch.STORED:
            return Runs.NOWHERE
        return Runs.HOST if self.fetch is Fetch.HOST else Runs.ON_DEMAND

    @property
    def probed(self) -> bool:
        """Whether a target of this kind is a probe: something people add, and the
        health strip shows (a stored kind's one target per deployment is neither)."""
        return self.runs is not Runs.NOWHERE

    def url(self, base: str, offset: int = 0) -> str:
        """The URL one read fetches: a followed stream asks for its next piece."""
        if not self.follows:
            return base
        sep = "&" if "?" in base else "?"
        return f"{base}{sep}offset={offset}&limit={LOG_READ_LIMIT}"

    def next_offset(self, offset: int, body: bytes, headers: Mapping[str, str]) -> int:
        """Where a followed HTTP stream's next read starts: the simulator and log relays
        say so (``x-log-next-offset``, validated: ``logfile.LogOffsetError`` when it is
        not an offset); otherwise count the bytes read."""
        return logfile.next_offset(headers.get("x-log-next-offset"), offset, len(body))


# --- The sources and their signal vocabularies ---------------------------------------

_HISTOGRAMS = (
    "ttft|itl|e2e|queue_time|prefill_time|decode_time|iteration_tokens|output_batch_tokens"
    "|request_preemptions"
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
ENGINE = Source(
    "engine",
    # probes/parsing/engine.py's canonical keys as probes/observe.py names them.
    re.compile(
        rf"^({_GAUGES}|scrape_span_s|(prompt|output)_tokens_per_request|({_COUNTERS})_rate"
        rf"|({_HISTOGRAMS})_((p50|p95|p99)(_lo|_hi)?|mean|count_rate|window_count|max_hi))$"
    ),
    values=Values.DERIVED,
    companions=True,
    aggregate_only=True,
)
SGLANG_INFO = Source(
    "sglang_info",
    re.compile(r"^sglang_(weight_gb|kvcache_gb|graph_gb|token_capacity|max_running_requests)$"),
)
PROMETHEUS = Source("prometheus", re.compile(r"^[a-z][a-z0-9_]{0,47}$"))
DCGM = Source("dcgm", re.compile(r"^gpu_[a-z0-9_]+$"))
# Besides its own, a log gives the engine signals its stats lines carry
# (evaluation.LOG_STANDS_IN), read when no engine target reports them.
LOG = Source(
    "log",
    re.compile(
        r"^(log_events|log_stats_[a-z0-9_]+|log_chunk_budget_tokens"
        r"|kv_cache_usage|requests_(running|waiting)"
        r"|(preemptions|prompt_tokens|generation_tokens)_rate)$"
    ),
    values=Values.DERIVED,
)
NVML = Source("nvml", re.compile(r"^nvml_[a-z0-9_]+$"))
ARTIFACT = Source(
    "artifact", re.compile(r"^artifact_[a-z0-9_]+$"), values=Values.SUMMARY, by_target=False
)


# --- The observers: a Read to observations, each a thin call into probes.observe -----


def _engine(read: Read) -> Observed:
    return observe.observe_engine(read.body, read.history, read.epoch, read.window_s)


def _dcgm(read: Read) -> Observed:
    return observe.observe_dcgm(read.body)


def _sglang_info(read: Read) -> Observed:
    return observe.observe_sglang_info(read.body)


def _prometheus(read: Read) -> Observed:
    return observe.observe_prometheus(read.body)


def _nvml(read: Read) -> Observed:
    return observe.observe_nvml(read.body)


def _log(read: Read) -> Observed:
    # The follower state (partial line, warm-up seen) continues from the last good poll,
    # however long ago: "captured after warm-up" must survive a gap in polling.
    state = observe.state_from_json(read.previous.get("follower"))
    _, seen = observe.observe_log(state, read.body, read.at)
    return seen


def _read_log_file(path: str, offset: int, roots: Sequence[Path]) -> HostRead:
    chunk = logfile.read_chunk(path, max(offset, 0), LOG_READ_LIMIT, roots)
    return HostRead(chunk.data, size=len(chunk.data), next_offset=chunk.next_offset)


def _read_nvml(path: str, offset: int, roots: Sequence[Path]) -> HostRead:
    return HostRead(nvml_reading.read_gpus())


_HTTP = frozenset({Needs.URL})
_ON_HOST = frozenset({Needs.HOST_QUEUE})

KINDS: tuple[ProbeKind, ...] = (
    ProbeKind(
        "engine",
        "Engine /metrics (vLLM or SGLang)",
        ENGINE,
        Fetch.GET,
        _HTTP,
        observe=_engine,
        unusable=(ExpositionError,),
        windowed=True,
        option="engine",
    ),
    ProbeKind(
        "sglang_info",
        "SGLang /server_info",
        SGLANG_INFO,
        Fetch.GET,
        _HTTP,
        observe=_sglang_info,
        unusable=(ServerInfoError,),
    ),
    ProbeKind(
        "prometheus",
        "Prometheus HTTP API",
        PROMETHEUS,
        Fetch.PROMQL,
        _HTTP | {Needs.QUERIES},
        observe=_prometheus,
        option="prometheus",
    ),
    ProbeKind(
        "dcgm",
        "dcgm-exporter /metrics",
        DCGM,
        Fetch.GET,
        _HTTP,
        observe=_dcgm,
        unusable=(ExpositionError,),
        option="dcgm",
    ),
    ProbeKind(
        "log_http",
        "Engine log over HTTP (offset)",
        LOG,
        Fetch.GET,
        _HTTP,
        observe=_log,
        follows=True,
        option="log",
    ),
    ProbeKind(
        "log_file",
        "Engine log file on a worker host",
        LOG,
        Fetch.HOST,
        _ON_HOST | {Needs.PATH},
        observe=_log,
        follows=True,
        read_here=_read_log_file,
        option="log-file",
    ),
    ProbeKind(
        "nvml",
        "NVML on a GPU host",
        NVML,
        Fetch.HOST,
        _ON_HOST,
        observe=_nvml,
        read_here=_read_nvml,
    ),
    ProbeKind(
        "profiler",
        "Profiler artifact endpoint (collected on request)",
        ARTIFACT,
        Fetch.ON_DEMAND,
        _HTTP,
    ),
    # Where analysed artifacts' signals are kept, whether uploaded or collected: one
    # target per deployment, written by the artifacts app (``artifacts.evidence``), so
    # evaluation has one read path. Never polled, never offered in the target form.
    ProbeKind(
        "artifacts",
        "Analysed profiler artifacts (kept by the console)",
        ARTIFACT,
        Fetch.STORED,
        frozenset(),
    ),
)

_BY_VALUE = {k.value: k for k in KINDS}
_BY_OPTION = {k.option: k for k in KINDS if k.option is not None}


def kind_of(value: str) -> ProbeKind:
    """The entry for a stored ``Target.kind`` (KeyError for a kind this version lacks)."""
    return _BY_VALUE[value]


def by_option(option: str) -> ProbeKind:
    """The entry behind one of ``diagnose``'s options (``--engine``, ``--log``...)."""
    return _BY_OPTION[option]


def values(*, runs: Runs | None = None, source: str | None = None) -> tuple[str, ...]:
    """Kind values in table order, those that run ``runs`` and/or feed ``source``."""
    return tuple(
        k.value
        for k in KINDS
        if (runs is None or k.runs is runs) and (source is None or k.source.name == source)
    )


def observed_values() -> tuple[str, ...]:
    """Kinds whose targets hold observations (what the evaluation view reads): those
    whose polls store them, and the stored kinds the console writes itself."""
    return tuple(k.value for k in KINDS if k.observe is not None or k.fetch is Fetch.STORED)


def probed_values() -> tuple[str, ...]:
    """Kinds people add as probe targets, and the health strip shows."""
    return tuple(k.value for k in KINDS if k.probed)


def stored_values() -> tuple[str, ...]:
    """Kinds whose observations the console writes (kept as long as what they came from:
    retention leaves them alone)."""
    return tuple(k.value for k in KINDS if k.fetch is Fetch.STORED)


def options() -> tuple[str, ...]:
    """``diagnose``'s endpoint options, in table order."""
    return tuple(_BY_OPTION)


def choices() -> list[tuple[str, str]]:
    """``Target.kind``'s choices, read from the table each time they are needed.

    A callable (Django 5) so that a migration records a reference to this function, not the
    list: adding a kind is its registry entry and parser, with no migration for a choice
    list that the database never sees."""
    return [(k.value, k.label) for k in KINDS]
