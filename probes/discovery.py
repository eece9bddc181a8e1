"""Targets from a team's Prometheus: which engines, dcgm-exporters and routers it scrapes.

A team that already runs Prometheus has every engine, exporter and label in it; typing each
target by hand copies them wrong. Discovery asks that Prometheus two things, through the
probes' network guard (``probes.net``: SSRF check at connect time, byte cap, deadline):

* ``/api/v1/series`` for the recent series of one representative family per *class*
  (:data:`CLASSES`: engine, dcgm-exporter, router), narrowed by the commander's label
  selector, which says what each (job, instance) serves;
* ``/api/v1/targets?state=active`` for the URL Prometheus scrapes each of them at and how
  its last scrape went.

What is found becomes probe targets of the kinds the product polls: an engine or exporter
the product scrapes itself (``engine`` / ``dcgm`` with Prometheus's scrape URL: full
histograms, ``cache_config_info``, flavour detection), a router as a ``prometheus`` target
on that Prometheus with a PromQL query scoped to its instance (there is no router kind).

Both answers are attacker-controllable JSON, so parsing is strict and bounded: counts,
string lengths and label counts are capped, odd types are a ``malformed`` error, never a
guess. The selector is parsed into label matchers and re-rendered, so nothing but matchers
reaches the ``match[]`` parameter. Everything but :func:`discover` is pure.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from probes import aio
from probes.models import TargetKind
from probes.net import FetchPolicy, ProbeError, afetch, guarded_async_client, validate_url
from probes.parsing import dcgm
from probes.parsing.engine import FLAVOURS
from probes.promapi import ERROR_STATUSES, api_data, api_url
from probes.promql import render_promql

MAX_TARGETS = 5_000
MAX_SERIES = 10_000
MAX_LABELS = 64
MAX_LABEL_CHARS = 512
MAX_MATCHERS = 20
MAX_SELECTOR_CHARS = 2_000
# Series seen in this window count as present; an instance silent for longer is gone.
LOOKBACK_S = 600.0


# --- the label selector -------------------------------------------------------------------

_MATCHER = re.compile(
    r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\')\s*'
)


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str
    quoted: str  # the value as written, quotes included (PromQL's own string syntax)

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.quoted}"


def parse_selector(text: str) -> tuple[Matcher, ...]:
    """``job="vllm", namespace=~"prod-.*"`` (braces optional) -> matchers; ``ValueError``
    naming what is wrong. ``__name__`` is refused: discovery chooses the families."""
    body = text.strip()
    if len(body) > MAX_SELECTOR_CHARS:
        raise ValueError(f"The selector is longer than {MAX_SELECTOR_CHARS:,} characters.")
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    matchers: list[Matcher] = []
    position = 0
    while body[position:].strip():
        found = _MATCHER.match(body, position)
        if found is None:
            raise ValueError(
                f"Cannot read a label matcher at {body[position : position + 30]!r}: write "
                'label="value" (or !=, =~, !~), separated by commas.'
            )
        name, op, quoted = found.groups()
        if name == "__name__":
            raise ValueError("Leave __name__ out: discovery chooses the metric names.")
        matchers.append(Matcher(name, op, quoted))
        position = found.end()
        if position < len(body):
            if body[position] != ",":
                raise ValueError(f"Expected a comma after {name}{op}{quoted}.")
            position += 1
    if len(matchers) > MAX_MATCHERS:
        raise ValueError(f"At most {MAX_MATCHERS} label matchers.")
    return tuple(matchers)


def selector_text(matchers: Sequence[Matcher]) -> str:
    return ", ".join(str(m) for m in matchers)


# --- what a series says it is -------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """A found (job, instance), what it is, and how to register it."""

    cls: str  # a key of CLASSES
    job: str
    instance: str
    series: int
    scrape_url: str = ""
    health: str = ""
    last_error: str = ""

    @property
    def key(self) -> str:
        return f"{self.cls}|{self.job}|{self.instance}"


@dataclass(frozen=True)
class TargetSpec:
    """A probe target to register: what ``probes.forms.TargetForm`` takes."""

    kind: str
    url: str
    replica: str
    queries: Mapping[str, str]


@dataclass(frozen=True)
class SeriesClass:
    """One kind of thing Prometheus scrapes that Atlas can probe.

    ``families``: metric names whose presence says an instance is one (a few per class
    keep the series answer small). ``register``: the target that probes it, or None when
    it cannot be registered from what Prometheus says (no scrape URL).
    """

    key: str
    title: str
    families: tuple[str, ...]
    register: Callable[[Instance, str], TargetSpec | None]


def _scraped(kind: str) -> Callable[[Instance, str], TargetSpec | None]:
    def register(found: Instance, prometheus: str) -> TargetSpec | None:
        if not found.scrape_url:
            return None
        return TargetSpec(kind, found.scrape_url, found.instance[:100], {})

    return register


ROUTER_P95 = (
    "histogram_quantile(0.95, sum by (le) (rate(router_forward_duration_seconds_bucket"
    '{job="${job}", instance="${instance}"}[5m])))'
)


def _router(found: Instance, prometheus: str) -> TargetSpec:
    # The signal name the playbooks' router measures read (investigations/playbooks).
    promql = render_promql(ROUTER_P95, job=found.job, instance=found.instance)
    return TargetSpec(
        TargetKind.PROMETHEUS, prometheus, found.instance[:100], {"router_forward_p95": promql}
    )


def _engine_families() -> tuple[str, ...]:
    """Every flavour's running-requests gauge, under each of its prefixes: one series per
    engine replica, whatever its version."""
    names: list[str] = []
    for flavour in FLAVOURS:
        spec = flavour.gauges.get("requests_running")
        if spec is None:
            continue
        for wire in spec.aliases:
            canonical = flavour.prefixes[0]
            for prefix in flavour.prefixes:
                names.append(prefix + wire.name.removeprefix(canonical))
    return tuple(dict.fromkeys(names))


# Two of the fields the dcgm parser reads: one series per GPU each, every exporter has them.
_DCGM_FAMILIES = tuple(
    n for n in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED") if n in dcgm.FIELDS
)

CLASSES: tuple[SeriesClass, ...] = (
    SeriesClass("engine", "Engine", _engine_families(), _scraped(TargetKind.ENGINE)),
    SeriesClass("dcgm", "dcgm-exporter", _DCGM_FAMILIES, _scraped(TargetKind.DCGM)),
    SeriesClass("router", "Router", ("router_forward_duration_seconds_count",), _router),
)
_CLASS_OF = {name: c.key for c in CLASSES for name in c.families}
CLASS_TITLES = {c.key: c.title for c in CLASSES}


def series_matchers(matchers: Sequence[Matcher]) -> list[str]:
    """One ``match[]`` per class: its families, and the commander's matchers."""
    extra = "".join(f", {m}" for m in matchers)
    out = []
    for cls in CLASSES:
        names = "|".join(cls.families)  # metric names: no regex or string escapes needed
        out.append(f'{{__name__=~"{names}"{extra}}}')
    return out


# --- parsing the answers ------------------------------------------------------------------


def _malformed(why: str) -> ProbeError:
    return ProbeError("malformed", f"not a Prometheus API answer: {why}", transient=False)


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _malformed("labels are not an object")
    if len(value) > MAX_LABELS:
        raise _malformed(f"a label set has more than {MAX_LABELS} labels")
    out = {}
    for key, text in value.items():
        if not isinstance(key, str) or not isinstance(text, str):
            raise _malformed("labels are not strings")
        out[key[:MAX_LABEL_CHARS]] = text[:MAX_LABEL_CHARS]
    return out


def parse_series(data: Any) -> dict[tuple[str, str, str], int]:
    """``/api/v1/series`` data -> series count per (class, job, instance)."""
    if not isinstance(data, list):
        raise _malformed("series data is not a list")
    if len(data) > MAX_SERIES:
        raise ProbeError(
            "too-large",
            f"{len(data):,} series exceed {MAX_SERIES:,}; narrow the selector",
            transient=False,
        )
    counts: dict[tuple[str, str, str], int] = {}
    for item in data:
        labels = _labels(item)
        cls = _CLASS_OF.get(labels.get("__name__", ""))
        if cls is None:  # Prometheus answered more than it was asked: ignore it
            continue
        key = (cls, labels.get("job", ""), labels.get("instance", ""))
        counts[key] = counts.get(key, 0) + 1
    return counts


@dataclass(frozen=True)
class Scrape:
    url: str
    health: str
    last_error: str


def parse_targets(data: Any) -> dict[tuple[str, str], Scrape]:
    """``/api/v1/targets`` data -> (job, instance) -> scrape URL and health."""
    if not isinstance(data, dict):
        raise _malformed("targets data is not an object")
    active = data.get("activeTargets", [])
    if not isinstance(active, list):
        raise _malformed("activeTargets is not a list")
    if len(active) > MAX_TARGETS:
        raise ProbeError(
            "too-large", f"{len(active):,} targets exceed {MAX_TARGETS:,}", transient=False
        )
    out: dict[tuple[str, str], Scrape] = {}
    for item in active:
        if not isinstance(item, dict):
            raise _malformed("a target is not an object")
        labels = _labels(item.get("labels", {}))
        url, health, error = (item.get(k, "") for k in ("scrapeUrl", "health", "lastError"))
        if not all(isinstance(v, str) for v in (url, health, error)):
            raise _malformed("scrapeUrl, health and lastError must be strings")
        try:
            validate_url(url)
        except ProbeError:
            url = ""  # not something a probe could ever read; listed, not registrable
        out[(labels.get("job", ""), labels.get("instance", ""))] = Scrape(
            url[:500], health[:20], error[:300]
        )
    return out


def instances(
    counts: Mapping[tuple[str, str, str], int], scrapes: Mapping[tuple[str, str], Scrape]
) -> list[Instance]:
    """Join what the series say with where Prometheus scrapes them, in class order."""
    order = {c.key: i for i, c in enumerate(CLASSES)}
    out = []
    for (cls, job, instance), count in counts.items():
        scrape = scrapes.get((job, instance))
        out.append(
            Instance(
                cls,
                job,
                instance,
                count,
                scrape.url if scrape else "",
                scrape.health if scrape else "",
                scrape.last_error if scrape else "",
            )
        )
    return sorted(out, key=lambda f: (order[f.cls], f.job, f.instance))


# --- new, registered and gone -------------------------------------------------------------


@dataclass(frozen=True)
class Registered:
    """A target the deployment already has, as plain values."""

    kind: str
    url: str
    replica: str
    enabled: bool


@dataclass(frozen=True)
class Row:
    found: Instance
    spec: TargetSpec | None
    registered: bool
    title: str = ""


@dataclass(frozen=True)
class Comparison:
    rows: tuple[Row, ...]
    gone: tuple[Registered, ...]

    @property
    def new(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.spec is not None and not r.registered)


def _same(spec: TargetSpec, target: Registered) -> bool:
    if spec.kind != target.kind or spec.url != target.url:
        return False
    # Several routers share one Prometheus target URL; the instance tells them apart.
    return spec.kind != TargetKind.PROMETHEUS or spec.replica == target.replica


def compare(
    found: Sequence[Instance], prometheus: str, registered: Sequence[Registered]
) -> Comparison:
    """Each found instance with the target it would become and whether the deployment has
    it; and the deployment's targets of the discoverable kinds that Prometheus no longer
    lists (engines and exporters by URL, routers on this Prometheus by instance)."""
    classes = {c.key: c for c in CLASSES}
    rows = []
    matched: set[Registered] = set()
    for item in found:
        spec = classes[item.cls].register(item, prometheus)
        hits = [t for t in registered if spec is not None and _same(spec, t)]
        matched.update(hits)
        rows.append(Row(item, spec, bool(hits), classes[item.cls].title))
    kinds = {TargetKind.ENGINE, TargetKind.DCGM}
    gone = tuple(
        t
        for t in registered
        if t not in matched
        and (
            t.kind in kinds
            or (t.kind == TargetKind.PROMETHEUS and t.url == prometheus and t.replica)
        )
    )
    return Comparison(tuple(rows), gone)


# --- asking Prometheus --------------------------------------------------------------------


@dataclass(frozen=True)
class Discovery:
    prometheus: str
    selector: str
    found: tuple[Instance, ...]


async def _discover(base: str, matchers: Sequence[Matcher], policy: FetchPolicy, now: float):
    params = [("match[]", m) for m in series_matchers(matchers)]
    params += [("start", f"{now - LOOKBACK_S:.3f}"), ("end", f"{now:.3f}")]
    query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote, safe="")
    series_url = f"{api_url(base, 'series')}?{query}"
    targets_url = f"{api_url(base, 'targets')}?state=active"
    async with guarded_async_client(policy, max_connections=2) as client:
        series, targets = await asyncio.gather(
            afetch(client, series_url, policy, accept_status=ERROR_STATUSES),
            afetch(client, targets_url, policy, accept_status=ERROR_STATUSES),
        )
    return parse_series(api_data(series)), parse_targets(api_data(targets))


def discover(
    base: str, selector: str, policy: FetchPolicy, *, now: float | None = None
) -> Discovery:
    """Ask the Prometheus at ``base`` what it scrapes under ``selector``; raises
    ``ValueError`` for a bad selector and ``ProbeError`` for what the fetch or the answer
    did wrong."""
    matchers = parse_selector(selector)
    api_url(base, "series")  # refuse a base that could steer the path before any fetch
    counts, scrapes = aio.run(
        _discover(base, matchers, policy, time.time() if now is None else now)
    )
    return Discovery(base.rstrip("/"), selector_text(matchers), tuple(instances(counts, scrapes)))
