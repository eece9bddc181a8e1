"""Reading a running engine once, before any target exists: what it reports about its own
configuration, and where each value came from.

A team registering a deployment knows its engines' URLs, not their KV pool in GiB; the
engine knows its pool (vLLM's ``cache_config_info``, SGLang's ``max_total_num_tokens``),
its served model and context length (``/v1/models``), and for SGLang its chunk size,
running-request cap and TP degree (``/server_info``). Each URL is fetched once through the
probes' network guard (``probes.collect.fetch_all``: SSRF check at connect time, byte cap,
deadline), parsed with the probes' own parsers and flavour table, and turned into
:class:`Reading` values that carry their source, so the commander can see "from
vllm:cache_config_info kv_cache_size_tokens on http://..." beside each proposed field.

Everything but :func:`read_engines` is pure: bodies in, readings out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from probes import observe
from probes.collect import fetch_all
from probes.models import TargetKind
from probes.net import FetchPolicy, ProbeError, validate_url
from probes.parsing.engine import InfoEndpoint, engine_signals, flavour_of
from probes.parsing.exposition import ExpositionError, parse_exposition
from probes.parsing.sglang_info import ServerInfoError

MAX_ENGINES = 16
MAX_MODELS_BYTES = 256 * 1024
MAX_TEXT = 200

# Engine gauges that describe the configuration, not the load (``probes.reported`` reads
# the same names from stored polls).
CONFIG_GAUGES = ("kv_capacity_tokens", "kv_block_size", "kv_blocks", "kv_max_concurrency")

# Body -> the snapshot that kind's probe stores, for the flavours' info endpoints: the
# same function the poller runs, so a value read here is the value a poll would store.
INFO_SNAPSHOTS: Mapping[str, Callable[[bytes], dict]] = {
    TargetKind.SGLANG_INFO: lambda body: observe.observe_sglang_info(body).snapshot,
}
INFO_ERRORS = (ServerInfoError, ValueError)


@dataclass(frozen=True)
class Reading:
    """One value an engine reported, in ``probes.reported``'s names, and its source."""

    key: str
    value: float | str
    source: str


@dataclass(frozen=True)
class EngineAnswer:
    """What one engine URL answered: its flavour, its readings (first one per key wins),
    what could not be read, and the probe targets that would poll it."""

    url: str
    flavour: str | None = None
    readings: tuple[Reading, ...] = ()
    problems: tuple[str, ...] = ()
    targets: tuple[tuple[str, str], ...] = ()  # (target kind, URL)

    def value(self, key: str) -> float | str | None:
        found = next((r for r in self.readings if r.key == key), None)
        return found.value if found is not None else None


@dataclass(frozen=True)
class Endpoints:
    """Where one engine answers: the base the commander gave, and the URLs read from it."""

    base: str
    metrics: str
    models: str

    def at(self, path: str) -> str:
        return _join(self.base, path)


def _join(base: str, path: str) -> str:
    return base.rstrip("/") + path


def endpoints(url: str) -> Endpoints:
    """``http://h:8000``, ``http://h:8000/`` or ``http://h:8000/metrics`` -> the engine's
    base and its /metrics and /v1/models URLs. Raises ``ProbeError`` for what can never
    be a probe target (``validate_url``) and for a query or fragment, which no engine
    endpoint takes."""
    parsed = validate_url(url.strip())
    if parsed.query or parsed.fragment:
        raise ProbeError("bad-url", "give the engine's URL without ? or #", transient=False)
    path = parsed.path.rstrip("/").removesuffix("/metrics")
    base = str(parsed.copy_with(path=path or "/")).rstrip("/")
    return Endpoints(base, _join(base, "/metrics"), _join(base, "/v1/models"))


def parse_urls(text: str) -> list[str]:
    """Engine URLs separated by newlines or spaces (duplicates dropped); ``ValueError``
    naming the one that cannot be an engine."""
    urls: list[str] = []
    for number, item in enumerate(text.split(), start=1):
        try:
            base = endpoints(item).base
        except ProbeError as exc:
            raise ValueError(f"URL {number} ({item[:60]}): {exc.message}") from None
        if base not in urls:
            urls.append(base)
    if not urls:
        raise ValueError("Give at least one engine URL.")
    if len(urls) > MAX_ENGINES:
        raise ValueError(f"At most {MAX_ENGINES} engines at once.")
    return urls


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and 0 < value < float("inf") else None


def read_metrics(body: bytes, url: str) -> tuple[str | None, list[Reading], list[str]]:
    """One /metrics body -> (flavour key, configuration readings, problems)."""
    try:
        exp = parse_exposition(body)
    except ExpositionError as exc:
        return None, [], [f"{url}: {exc}"]
    signals = engine_signals(exp)
    flavour = flavour_of(signals.flavour)
    if flavour is None:
        return None, [], [f"{url}: no vLLM or SGLang series in the answer"]
    readings = [
        Reading("engine", flavour.engine, f"its metric names ({flavour.prefixes[0]}*) on {url}")
    ]
    labels = {key: label for labels in flavour.info.values() for label, key in labels.items()}
    for key in CONFIG_GAUGES:
        gauge = signals.gauges.get(key)
        value = _number(gauge.value) if gauge is not None else None
        if value is None:
            continue
        family = signals.sources.get(key, "")
        where = family
        if family in flavour.info:
            label = labels.get(key)
            has_label = any(any(k == label for k, _ in s.labels) for s in exp.samples(family))
            where = f"{family} {label}" if has_label else f"{family} num_gpu_blocks x block_size"
        readings.append(Reading(key, value, f"{where} on {url}"))
    if signals.model_names:
        readings.append(
            Reading(
                "served_model",
                signals.model_names[0][:MAX_TEXT],
                f"the model_name label of {flavour.prefixes[0]}* series on {url}",
            )
        )
    return signals.flavour, readings, []


def read_models(body: bytes, url: str) -> tuple[list[Reading], list[str]]:
    """An OpenAI-style /v1/models body -> served model and max model length, bounded:
    over 256 KiB, not JSON, or not ``{"data": [{"id": ...}]}`` is a problem, not a guess."""
    if len(body) > MAX_MODELS_BYTES:
        return [], [f"{url}: {len(body):,} bytes is not a model list"]
    try:
        payload: Any = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return [], [f"{url}: not JSON"]
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not data:
        return [], [f"{url}: no model listed"]
    first = data[0]
    if not isinstance(first, dict) or not isinstance(first.get("id"), str) or not first["id"]:
        return [], [f"{url}: no model listed"]
    readings = [Reading("served_model", first["id"][:MAX_TEXT], f"/v1/models id on {url}")]
    length = _number(first.get("max_model_len"))
    if length is not None and length.is_integer():
        readings.append(Reading("max_model_len", length, f"/v1/models max_model_len on {url}"))
    problems = []
    if len(data) > 1:
        problems.append(
            f"{url}: {len(data)} models served; the first ({readings[0].value}) is used"
        )
    return readings, problems


def read_info(flavour_key: str, body: bytes, url: str) -> tuple[list[Reading], list[str]]:
    """A flavour's info endpoint body -> the readings its budget function gives."""
    flavour = flavour_of(flavour_key)
    endpoint = flavour.info_endpoint if flavour is not None else None
    snapshot_of = INFO_SNAPSHOTS.get(endpoint.target_kind) if endpoint is not None else None
    if endpoint is None or snapshot_of is None:
        return [], []
    try:
        snapshot = snapshot_of(body)
    except INFO_ERRORS as exc:
        return [], [f"{url}: {exc}"]
    name = flavour.engine if flavour is not None else ""
    readings = [Reading("engine", name, f"{name} {endpoint.path} on {url}")]
    for key, value in endpoint.budget(snapshot).items():
        readings.append(Reading(key, value, f"{name} {endpoint.path} on {url}"))
    return readings, []


def first_wins(readings: Sequence[Reading]) -> tuple[Reading, ...]:
    seen: dict[str, Reading] = {}
    for reading in readings:
        seen.setdefault(reading.key, reading)
    return tuple(seen.values())


@dataclass(frozen=True)
class Report:
    """Several engines (one per replica) merged: one reading per key, and what disagreed."""

    readings: Mapping[str, Reading] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def values(self) -> dict[str, float | str]:
        """The plain report ``deployments.proposals.propose`` takes."""
        return {key: reading.value for key, reading in self.readings.items()}


# Of several replicas the smallest pool is the budget's (it fills first); the others
# should agree, and a disagreement is shown rather than averaged away.
SMALLEST = frozenset({"kv_capacity_tokens", "kv_blocks", "kv_max_concurrency"})


def merge(answers: Sequence[EngineAnswer]) -> Report:
    chosen: dict[str, Reading] = {}
    problems: list[str] = []
    for answer in answers:
        problems.extend(answer.problems)
        for reading in answer.readings:
            have = chosen.get(reading.key)
            if have is None:
                chosen[reading.key] = reading
            elif reading.key in SMALLEST:
                if float(reading.value) < float(have.value):
                    chosen[reading.key] = reading
            elif reading.value != have.value:
                problems.append(
                    f"Replicas disagree on {reading.key}: {have.value} ({have.source}) and "
                    f"{reading.value} ({reading.source}); the first is proposed."
                )
    return Report(chosen, tuple(problems))


def _info_endpoint(flavour_key: str | None) -> InfoEndpoint | None:
    found = flavour_of(flavour_key) if flavour_key else None
    return found.info_endpoint if found is not None else None


def _fetch_error(url: str, error: ProbeError | None) -> str:
    return f"{url}: {error}" if error is not None else f"{url}: no answer"


def read_engines(urls: Sequence[str], policy: FetchPolicy) -> list[EngineAnswer]:
    """Fetch each engine's /metrics and /v1/models, then the info endpoint of the flavour
    its metrics showed (SGLang's /server_info), all through the guard, concurrently."""
    points = [endpoints(url) for url in urls]
    first = fetch_all(
        [(f"{i}:metrics", p.metrics) for i, p in enumerate(points)]
        + [(f"{i}:models", p.models) for i, p in enumerate(points)],
        policy,
    )
    by_key = {f.key: f for f in first}
    partial: list[tuple[str | None, list[Reading], list[str]]] = []
    for i, point in enumerate(points):
        metrics, models = by_key[f"{i}:metrics"], by_key[f"{i}:models"]
        if metrics.result is not None:
            flavour, readings, problems = read_metrics(metrics.result.body, point.metrics)
        else:
            flavour, readings, problems = None, [], [_fetch_error(point.metrics, metrics.error)]
        if models.result is not None:
            found, trouble = read_models(models.result.body, point.models)
            readings, problems = found + readings, problems + trouble
        else:
            problems.append(_fetch_error(point.models, models.error))
        partial.append((flavour, readings, problems))
    info_jobs: list[tuple[str, str]] = []
    for i, (flavour, _, _) in enumerate(partial):
        endpoint = _info_endpoint(flavour)
        if endpoint is not None:
            info_jobs.append((f"{i}:info", points[i].at(endpoint.path)))
    infos = {f.key: f for f in fetch_all(info_jobs, policy)}
    info_urls = dict(info_jobs)
    answers = []
    for i, (flavour, readings, problems) in enumerate(partial):
        targets = [(TargetKind.ENGINE.value, points[i].metrics)] if flavour else []
        info, endpoint = infos.get(f"{i}:info"), _info_endpoint(flavour)
        if info is not None and endpoint is not None and flavour is not None:
            url = info_urls[f"{i}:info"]
            if info.result is not None:
                told, trouble = read_info(flavour, info.result.body, url)
                # The engine's own configuration endpoint names it beyond doubt.
                readings, problems = told + readings, problems + trouble
                if told:
                    targets.append((endpoint.target_kind, url))
            else:
                problems.append(_fetch_error(url, info.error))
        answers.append(
            EngineAnswer(
                url=points[i].base,
                flavour=flavour,
                readings=first_wins(readings),
                problems=tuple(problems),
                targets=tuple(targets),
            )
        )
    return answers


def replica_names(urls: Sequence[str]) -> list[str]:
    """A readable replica name per engine: its host:port, with the path when several
    engines share one (a simulator's ``/replicas/1``)."""
    netlocs = [httpx.URL(url).netloc for url in urls]
    names: list[str] = []
    for url, netloc in zip(urls, netlocs, strict=True):
        parsed = httpx.URL(url)
        name = f"{parsed.host}:{parsed.port}" if parsed.port else parsed.host
        if netlocs.count(netloc) > 1:
            name = f"{name}{parsed.path}"
        names.append(name[:100])
    return names
