"""Filling a Prometheus target's history from range queries, as ordinary observations.

An investigation opened after the peak needs the minutes before it. Engines and GPUs are
kept by the light cadence (``probes.dispatch``); a Prometheus server keeps its own
history, so for it the layer above asks, at open, for each query over the window before:
``query_range`` on the poll grid, each point stored as the observation a live poll at
that instant would have stored (the query's name as the signal, the series' labels, the
point's own time). Windows, span rules and charts read them like any other; the
``(target, signal, labels, time)`` key keeps a replay, or a live poll of the same instant,
from writing a row twice.

Probes do not know what an investigation is: the caller says what to query and when.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from probes import aio
from probes.models import Observation, Target
from probes.net import FetchPolicy, ProbeError, guarded_async_client
from probes.observe import label_text
from probes.promapi import QueryResult, range_query
from probes.store import SIGNAL_MAX, fit_labels

MAX_SERIES_PER_QUERY = 200  # as a live poll keeps (observe.observe_prometheus)


@dataclass(frozen=True)
class RangeJob:
    """One query from ``start`` every ``step_s`` seconds up to, not including, ``end`` (unix
    seconds; ``end`` is the instant live polling took over)."""

    signal: str
    promql: str
    start: float
    end: float
    step_s: float


@dataclass(frozen=True)
class Backfilled:
    """Rows written per signal, and what Prometheus said for the queries that failed."""

    written: dict[str, int]
    errors: dict[str, str]

    @property
    def total(self) -> int:
        return sum(self.written.values())


def points_of(result: QueryResult, *, before: float) -> list[tuple[float, str, float]]:
    """``(time, labels, value)`` for each finite point strictly before ``before`` (a live
    poll owns the instant the investigation opened and what follows). Pure."""
    out = []
    for series in result.series[:MAX_SERIES_PER_QUERY]:
        labels = label_text(tuple((k, v) for k, v in series.labels if k != "__name__"))
        out.extend((t, labels, v) for t, v in series.points if t < before and math.isfinite(v))
    return out


async def _run(
    base_url: str, jobs: Sequence[RangeJob], policy: FetchPolicy
) -> list[QueryResult | ProbeError]:
    async with guarded_async_client(policy, max_connections=8) as client:

        async def one(job: RangeJob) -> QueryResult | ProbeError:
            try:
                return await range_query(
                    client, base_url, job.promql, policy,
                    start=job.start, end=job.end, step=job.step_s,
                )  # fmt: skip
            except ProbeError as exc:
                return exc

        return list(await asyncio.gather(*(one(job) for job in jobs)))


def backfill(target: Target, jobs: Sequence[RangeJob], policy: FetchPolicy) -> Backfilled:
    """Run ``jobs`` against the Prometheus ``target`` and store their points."""
    answers = aio.run(_run(target.url, jobs, policy)) if jobs else []
    written: dict[str, int] = {}
    errors: dict[str, str] = {}
    for job, answer in zip(jobs, answers, strict=True):
        if isinstance(answer, ProbeError):
            errors[job.signal] = f"{answer.kind}: {answer}"
            continue
        rows = [
            Observation(
                target_id=target.pk,
                taken_at=datetime.fromtimestamp(t, tz=UTC),
                signal=job.signal[:SIGNAL_MAX],
                labels=fit_labels(labels),
                value=value,
            )
            for t, labels, value in points_of(answer, before=job.end)
        ]
        before = Observation.objects.filter(target=target, signal=job.signal).count()
        Observation.objects.bulk_create(rows, ignore_conflicts=True, batch_size=2000)
        written[job.signal] = (
            Observation.objects.filter(target=target, signal=job.signal).count() - before
        )
    return Backfilled(written, errors)
