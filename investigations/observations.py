"""Stored observations as the view evaluation reads: (source, signal) -> labelled series.

One rule for the Celery path and for ``diagnose``: every series is tagged with the
target it came from (an analysed artifact's with the artifact it came from), and an
engine's per-rank series are left out (the aggregate is what playbooks read; ranks are
compared through GPU signals). Every series is an ``Observation`` row: an artifact's
signals are written as observations when its analysis is stored (``artifacts.evidence``),
so there is one read path.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta
from operator import itemgetter

from django.core.cache import cache
from django.db import NotSupportedError
from django.db.models import CharField, FloatField, Func, Q, Subquery
from django.db.models.functions import Cast

from probes.kinds import kind_of, observed_values
from probes.models import Observation, Target
from probes.vocabulary import aggregate_only, bound_of, by_target


def series_labels(source: str, target_key: str, labels: str) -> str | None:
    """The labels a series is known by in the view, or None to leave it out."""
    if labels and aggregate_only(source):
        return None
    if not by_target(source):
        return labels
    return f"target={target_key}" + (f",{labels}" if labels else "")


# Signals evaluation reads beyond the playbook's own measures (expected values).
EXPECTED_INPUTS = {
    "prompt_tokens_rate": 300,
    "e2e_count_rate": 300,
    "kv_cache_usage": 300,
    "requests_running": 300,
    "generation_tokens_rate": 300,
    # the lengths when no request started or finished in the window (evaluation.py)
    "ttft_count_rate": 300,
    "prompt_tokens_per_request": 300,
    "output_tokens_per_request": 300,
    # expected.full_sm_clock_mhz when the budget gives no SM clock (evaluation.py)
    "gpu_sm_clock_max_mhz": 300,
    "nvml_sm_clock_max_mhz": 300,
    # expected.clock_stretch: the slowest loaded rank's SM clock (evaluation.py)
    "gpu_sm_clock_mhz": 300,
    "gpu_gpu_util_pct": 300,
    # expected.kv_capacity_tokens and the block size, where the engine reports them
    "kv_capacity_tokens": 300,
    "kv_block_size": 300,
    "sglang_token_capacity": 300,
}


class EpochSeconds(Func):
    """A datetime column as float seconds since the epoch, computed by the database.

    Converting tens of thousands of rows one by one in Python (parse or adapt the
    datetime, make it aware, ``.timestamp()``) was most of a page view. The value is
    exactly what ``datetime.timestamp()`` gives: integer microseconds divided by 10^6 in
    double precision, correctly rounded on both backends (PostgreSQL's ``EXTRACT(EPOCH)``
    is an exact numeric; SQLite stores Django's UTC text, ``YYYY-MM-DD HH:MM:SS[.ffffff]``).
    """

    output_field = FloatField()

    @property
    def convert_value(self):
        # Both backends already return a float: no per-row converter.
        return self._convert_value_noop

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return (
            f"((CAST(strftime('%%s', {sql}) AS INTEGER) * 1000000"
            f" + CAST(substr({sql}, 21, 6) AS INTEGER)) / 1000000.0)",
            (*params, *params),
        )

    def as_postgresql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"(EXTRACT(EPOCH FROM {sql}))::double precision", params

    def as_sql(self, compiler, connection, **extra_context):
        raise NotSupportedError("EpochSeconds is written for PostgreSQL and SQLite")


# A page read may be reused for this many seconds (see ``load_observations``).
REUSE_S = 10

Stored = tuple[str, str, str, list]  # (target id as text, signal, labels, points by time)


def load_observations(
    deployment_id, signals: Mapping[str, int], now: datetime, *, reuse: bool = False
) -> dict:
    """The deployment's observations of ``signals`` (name -> window seconds), each only as
    far back as its own window: a 48-hour log count must not drag in 48 hours of every
    engine gauge on each page refresh.

    Rows come back with the time as epoch seconds and the target as text, so no value is
    converted row by row in Python. An engine's per-rank series are filtered out in the
    query rather than fetched and dropped.

    ``reuse`` (the page and its 5 s tree refresh, which many people watch at once) may
    answer from a read made up to ``REUSE_S`` seconds earlier, cut to each window at
    ``now``. That is exactly what a fresh read would return: the read was taken
    ``REUSE_S`` wider on both sides, observations are only ever inserted, and the cache
    key holds the newest observation id and the targets' last poll times (an insert and
    its target's ``last_polled_at`` commit together in ``probes.store.record_cycle``),
    so any row stored since is a different key (an analysed artifact's rows, written at
    its past ``captured_at``, too: they take new ids). The one delete outside retention, a
    deleted artifact's rows (``artifacts.evidence.forget``), may still be read for up to
    ``REUSE_S``. Decisions, fixes and evaluation are not part of it: they are read and
    computed at ``now`` on every request.
    """
    wanted = {**EXPECTED_INPUTS}
    for signal, window in signals.items():
        wanted[signal] = max(window, wanted.get(signal, 0))
    if reuse:
        kinds, stored = _reused(deployment_id, wanted, now)
    else:
        targets = _targets(deployment_id)
        kinds = {text: kind for _, text, kind, *_ in targets}
        stored = _read(targets, wanted, now)
    view: dict = defaultdict(lambda: defaultdict(list))
    found = []
    for target_id, signal, labels, points in stored:
        source = kind_of(kinds[target_id]).source.name
        key = series_labels(source, target_id[:8], labels)
        if key is not None:
            found.append((points[0][0], target_id, labels, source, signal, key, points))
    # Series in the order they first appear in time, as one time-ordered scan meets them
    # (ties by target and labels): the order charts draw them and reducers sum them.
    found.sort(key=itemgetter(0, 1, 2))
    for *_, source, signal, key, points in found:
        series = view[(source, signal)]
        if key in series:  # two targets whose ids share a prefix: one series, by time
            points = sorted(series[key] + points, key=itemgetter(0))
        series[key] = points
    return {key: list(series.items()) for key, series in view.items()}


def _targets(deployment_id, *, version: bool = False) -> list[tuple]:
    """(pk, pk as text, kind[, last polled, newest observation id]) per target read."""
    fields = ["pk", Cast("pk", CharField()), "kind"]
    if version:
        newest = Observation.objects.order_by("-pk").values("pk")[:1]
        fields += ["last_polled_at", Subquery(newest)]
    return list(
        Target.objects.filter(deployment_id=deployment_id, kind__in=observed_values())
        .order_by("pk")
        .values_list(*fields)
    )


def _read(targets: list[tuple], wanted: Mapping[str, int], now: datetime) -> list[Stored]:
    # An engine's per-rank series are left out here rather than fetched and dropped.
    aggregated = [t[0] for t in targets if kind_of(t[2]).source.aggregate_only]
    others = [t[0] for t in targets if not kind_of(t[2]).source.aggregate_only]
    # One term per window and kind of target, each a range on the unique index
    # (target, signal[, labels], taken_at), so the database seeks instead of scanning
    # every row of the deployment's targets (and Django compiles a few terms, not 2 per
    # signal).
    # A quantile's bucket bounds live in its own row (``Observation.lo`` / ``.hi``): asked
    # for ``ttft_p95_lo``, read ``ttft_p95`` (over the longer of the two windows) and take
    # each bound within its own window. Bounds stored as rows of their own (older rows)
    # are read by name as before.
    since_of = {signal: (now - timedelta(seconds=w)).timestamp() for signal, w in wanted.items()}
    bounds: dict[str, list[tuple[int, str]]] = defaultdict(list)  # quantile: (column, bound)
    reads = dict(wanted)
    for signal, window in wanted.items():
        found = bound_of(signal)
        if found is not None:
            base, end = found
            bounds[base].append((0 if end == "lo" else 1, signal))
            reads[base] = max(window, reads.get(base, 0))
    # A quantile read over a wider window than its own, or only for its bounds: where its
    # own points start (never, when it was not asked for). Every other row is in window.
    cut = {base: since_of.get(base, math.inf) for base in bounds if reads[base] != wanted.get(base)}
    by_window: dict[int, list[str]] = defaultdict(list)
    for signal, window in reads.items():
        by_window[window].append(signal)
    condition = Q(pk__in=[])
    for window, names in sorted(by_window.items()):
        since = now - timedelta(seconds=window)
        if others:
            condition |= Q(target_id__in=others, signal__in=names, taken_at__gt=since)
        if aggregated:
            condition |= Q(
                target_id__in=aggregated, signal__in=names, labels="", taken_at__gt=since
            )
    rows = Observation.objects.filter(condition, taken_at__lte=now).values_list(
        Cast("target_id", CharField()), "signal", "labels", EpochSeconds("taken_at"), "value",
        "lo", "hi",
    )  # fmt: skip
    # Grouped here rather than sorted by the database: an ORDER BY on the text columns
    # cost more than the read itself on PostgreSQL. Each series is sorted by time below,
    # which is linear when the rows came in index order, as they usually do.
    grouped: dict[tuple[str, str, str], list] = {}
    for target_id, signal, labels, taken_at, value, lo, hi in rows:
        if signal not in cut or taken_at > cut[signal]:
            points = grouped.get((target_id, signal, labels))
            if points is None:
                points = grouped[(target_id, signal, labels)] = []
            points.append((taken_at, value))
        for column, name in bounds.get(signal, ()):
            edge = hi if column else lo
            if edge is not None and taken_at > since_of[name]:
                grouped.setdefault((target_id, name, labels), []).append((taken_at, edge))
    for points in grouped.values():
        points.sort(key=itemgetter(0))
    return [(*key, points) for key, points in grouped.items()]


def _reused(deployment_id, wanted: Mapping[str, int], now: datetime):
    """(kinds, stored) from a cached read that covers ``wanted`` at ``now``, cut to it."""
    targets = _targets(deployment_id, version=True)
    kinds = {text: kind for _, text, kind, *_ in targets}
    polled = max((t[3] for t in targets if t[3] is not None), default=None)
    newest = targets[0][4] if targets else None
    who = tuple((text, kind) for _, text, kind, *_ in targets)
    key = f"atlas:observations:{deployment_id}:{newest}:{polled.timestamp() if polled else 0}"
    at = now.timestamp()
    entry = cache.get(key)
    if not (entry and entry[1] == who and _covers(entry[0], entry[2], wanted, at)):
        anchor = now + timedelta(seconds=REUSE_S)
        wider = {signal: window + 2 * REUSE_S for signal, window in wanted.items()}
        entry = (anchor.timestamp(), who, wider, _read(targets, wider, anchor))
        cache.set(key, entry, timeout=REUSE_S)
    stored = []
    for target_id, signal, labels, points in entry[3]:
        window = wanted.get(signal)
        if window is None:
            continue
        low = bisect_right(points, at - window, key=itemgetter(0))
        high = bisect_right(points, at, key=itemgetter(0))
        if low < high:
            stored.append((target_id, signal, labels, points[low:high]))
    return kinds, stored


def _covers(anchor: float, read: Mapping[str, int], wanted: Mapping[str, int], at: float) -> bool:
    """Whether a read of ``read`` windows ending at ``anchor`` holds every window of
    ``wanted`` ending at ``at``."""
    return at <= anchor and all(
        signal in read and anchor - read[signal] <= at - window for signal, window in wanted.items()
    )


def signals_of(playbook) -> dict[str, int]:
    """Signal name -> the longest window any of the playbook's measures reads it over."""
    out: dict[str, int] = {}
    for measure in playbook.measures():
        out[measure.signal] = max(measure.window_s, out.get(measure.signal, 0))
    return out
