"""Probe tasks: thin wrappers that take ids and primitives and write idempotently.

``enqueue_due`` enqueues one HTTP poll per deployment whose polling is active and whose
cycle is due, and one ``poll_host_target`` per due host target. ``poll_cycle`` claims the
deployment's HTTP targets, fetches them concurrently, turns bodies into observations and
stores the cycle under the (target, cycle) unique key. What runs after a poll (evaluation)
is not the probes' business: ``investigations.tasks`` chains it and drives the dispatch.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from datetime import datetime, timedelta

from billiard.exceptions import WorkerLostError
from celery import shared_task
from celery.signals import task_revoked
from celery.worker.request import Request
from django.conf import settings
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError
from django.utils import timezone

from probes import logfile, retention, window
from probes.collect import fetch_all, query_all
from probes.dispatch import due_polls
from probes.kinds import Fetch, Read, kind_of
from probes.models import HTTP_KINDS, Poll, Target, WorkerHeartbeat
from probes.net import ProbeError
from probes.policy import cycle_time_left, fetch_policy
from probes.store import (
    PollOutcome,
    already_polled,
    claim_targets,
    record_cycle,
    release_targets,
    release_task_claims,
)

log = logging.getLogger(__name__)
HEARTBEAT_RETENTION = timedelta(days=1)
WINDOW_S = 60.0


@shared_task(name="probes.record_heartbeat", bind=True)
def record_heartbeat(self, tick: str | None = None, sent_at: str | None = None) -> None:
    """Record that a worker is consuming. ``tick`` makes redelivery harmless."""
    info = self.request
    tick_id = uuid.UUID(tick) if tick else uuid.UUID(info.id)
    sent = datetime.fromisoformat(sent_at) if sent_at else timezone.now()
    queue = (info.delivery_info or {}).get("routing_key", "") or ""
    # A concurrent redelivery may win the insert: the beat is recorded either way.
    with contextlib.suppress(IntegrityError):
        WorkerHeartbeat.objects.get_or_create(
            tick=tick_id,
            defaults={"hostname": info.hostname or "unknown", "queue": queue, "sent_at": sent},
        )
    # Keep the table small: liveness only ever looks at the last few minutes.
    WorkerHeartbeat.objects.filter(recorded_at__lt=timezone.now() - HEARTBEAT_RETENTION).delete()


@shared_task(name="probes.prune_raw_data")
def prune_raw_data() -> int:
    """Hourly: drop raw polls and observations outside investigation windows."""
    return retention.prune(timedelta(hours=settings.ATLAS_RAW_RETENTION_HOURS))


def enqueue_due(now: datetime, *, http_poll, light_poll=None) -> int:
    """Enqueue the polls due at ``now``, HTTP ones as ``http_poll`` (a task taking the
    deployment id and the cycle), light ones (no investigation open: store, evaluate
    nothing) as ``light_poll`` (default ``poll_light``); returns how many were enqueued."""
    count = 0
    for due in due_polls(now):
        if due.has_http_targets:
            ((light_poll or poll_light) if due.light else http_poll).apply_async(
                args=[str(due.deployment_id), due.cycle_at.isoformat()],
                expires=2 * due.interval_s,  # a stale cycle is worth nothing
            )
            count += 1
        for target_id, queue in due.host_targets:
            # NVML and log files are read where they are: on the GPU host's own worker.
            poll_host_target.apply_async(
                args=[str(target_id), due.cycle_at.isoformat()],
                queue=queue,
                expires=2 * due.interval_s,
            )
            count += 1
    return count


class ClaimReleasingRequest(Request):
    """The worker's record of a claiming task: when the pool process running it dies
    (SIGKILL, OOM), its claims are freed at once instead of at the end of their lease.

    The main process sees the death (WorkerLostError) and requeues the message; the
    redelivery retakes the claims under the same task id if it still runs, and meanwhile
    the next cycle's task is not turned away by a claim nobody is working on."""

    def on_failure(self, exc_info, send_failed_event=True, return_ok=False):
        exc = exc_info.exception
        if isinstance(getattr(exc, "exc", exc), WorkerLostError):
            _release_claims(self.id, "its pool process died")
        return super().on_failure(exc_info, send_failed_event, return_ok)


def _release_claims(task_id: str | None, why: str) -> None:
    """Free a task's claims from the worker's main process; never raises."""
    if not task_id:
        return
    try:
        freed = release_task_claims(task_id)
    except DatabaseError:
        # The lease still bounds the claim; a database outage is reported elsewhere.
        log.warning("could not release the claims of task %s (%s)", task_id, why, exc_info=True)
        return
    if freed:
        log.info("released %d target claim(s) of task %s: %s", freed, task_id, why)


@task_revoked.connect
def release_claims_of_revoked(sender=None, request=None, **_kwargs) -> None:
    """A revoked message (expired, or revoked by hand) never runs: free its claims now.

    Runs in the worker's main process, which discards the message. The case it is for: a
    pool child SIGKILLed mid-poll (OOM killer) leaves its targets claimed by the task id;
    the broker redelivers the message, and a redelivery within ``expires`` retakes the
    claim under the same id and finishes. One past ``expires`` is discarded here, and
    without this the dead claim held the targets for the whole lease (the task time
    limit, 90 s), so every later cycle of the deployment found them claimed."""
    _release_claims(getattr(request, "id", None), "its message was revoked or expired")


# A poll retries only when the database went away mid-cycle; a target that failed is
# simply polled again next cycle, which is the retry that matters for evidence.
RETRY = {
    "Request": ClaimReleasingRequest,
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 2,
    "retry_backoff_max": 30,
    "max_retries": 3,
}


@shared_task(name="probes.poll_deployment", bind=True, **RETRY)
def poll_deployment(self, deployment_id: str, cycle_at: str) -> int:
    """Poll one deployment's HTTP targets for one cycle, and nothing else. Idempotent."""
    return poll_cycle(deployment_id, datetime.fromisoformat(cycle_at), task_id=self.request.id)


@shared_task(name="probes.poll_light", bind=True, **RETRY)
def poll_light(self, deployment_id: str, cycle_at: str) -> int:
    """The light cadence (no investigation open): poll one deployment's HTTP targets but
    Prometheus (its history is backfilled when an investigation opens). Idempotent."""
    cycle = datetime.fromisoformat(cycle_at)
    return poll_cycle(deployment_id, cycle, task_id=self.request.id, light=True)


def poll_cycle(
    deployment_id, cycle: datetime, *, task_id: str | None = None, light: bool = False
) -> int:
    """Poll one deployment's HTTP targets for ``cycle``; returns the polls stored.
    ``light`` leaves Prometheus targets out (see ``probes.dispatch``).

    Idempotent under redelivery: targets are claimed for the task, and a (target, cycle)
    already stored is not fetched again."""
    # Light polls skip PromQL targets: their Prometheus keeps its own history.
    kinds = [k for k in HTTP_KINDS if not (light and kind_of(k).fetch is Fetch.PROMQL)]
    rows = list(
        Target.objects.filter(
            deployment_id=deployment_id, enabled=True, kind__in=kinds
        ).values_list("pk", "deployment__poll_interval_s")
    )
    ids = [pk for pk, _ in rows]
    task_id = task_id or f"local-{uuid.uuid4()}"
    lease = timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    held = claim_targets(ids, task_id, lease=lease)
    try:
        todo = set(held) - already_polled(held, cycle)
        # A hung target must not carry this poll into the next cycle: the next cycle's
        # task would find every target still claimed, and the good ones would miss it.
        budget = cycle_time_left(cycle, rows[0][1], timezone.now()) if rows else None
        stored = poll_targets(list(Target.objects.filter(pk__in=todo)), cycle, budget_s=budget)
    finally:
        release_targets(held, task_id)
    return stored


@shared_task(name="probes.poll_host_target", bind=True, **RETRY)
def poll_host_target(self, target_id: str, cycle_at: str) -> int:
    """Read one NVML or log-file target on this host for one cycle. Idempotent."""
    cycle = datetime.fromisoformat(cycle_at)
    task_id = self.request.id or f"local-{uuid.uuid4()}"
    lease = timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    held = claim_targets([target_id], task_id, lease=lease)
    try:
        if not held or already_polled(held, cycle):
            return 0
        target = Target.objects.get(pk=target_id)
        return record_cycle(cycle, [_host_outcome(target, cycle)])
    finally:
        release_targets(held, task_id)


def _host_outcome(target: Target, cycle: datetime) -> PollOutcome:
    kind = kind_of(target.kind)
    started = time.monotonic()
    if kind.read_here is None:
        return _unsupported(target, {"target_id": target.pk})
    try:
        here = kind.read_here(target.path, target.log_offset, settings.ATLAS_LOG_FILE_ROOTS)
    except ProbeError as error:
        return PollOutcome(
            target_id=target.pk,
            ok=False,
            latency_s=time.monotonic() - started,
            error_kind=error.kind,
            error=str(error),
            transient=error.transient,
        )
    base = {"target_id": target.pk, "latency_s": time.monotonic() - started}
    if here.size is not None:
        base["size_bytes"] = here.size
    return _observed(target, here.body, cycle, [], base, here.next_offset)


def poll_targets(targets: list[Target], cycle: datetime, *, budget_s: float | None = None) -> int:
    """Fetch, observe and store one cycle for these targets (the claim is the caller's).

    ``budget_s`` caps every fetch's deadline (see ``cycle_time_left``)."""
    if not targets:
        return 0
    policy = fetch_policy(budget_s=budget_s)
    fetched_as = {t.pk: kind_of(t.kind).fetch for t in targets}
    prometheus = [t for t in targets if fetched_as[t.pk] is Fetch.PROMQL]
    scraped = [t for t in targets if fetched_as[t.pk] is not Fetch.PROMQL]
    fetched = {f.key: f for f in fetch_all([(str(t.pk), _url(t)) for t in scraped], policy)}
    history = _history(scraped, cycle)
    outcomes = [_outcome(t, fetched[str(t.pk)], history.get(t.pk, []), cycle) for t in scraped]
    outcomes += _prometheus_outcomes(prometheus, cycle, policy)
    stored = record_cycle(cycle, outcomes)
    _keep_recent(cycle, outcomes, scraped)
    return stored


def _prometheus_outcomes(targets: list[Target], cycle: datetime, policy) -> list[PollOutcome]:
    """Each Prometheus target's configured queries, evaluated at the cycle's instant.

    The poll succeeds if any query answered; failed queries are listed in the snapshot
    with the server's message, and the poll fails only when every query did."""
    jobs = [
        (str(t.pk), name, t.url, promql)
        for t in targets
        for name, promql in sorted((t.queries or {}).items())
    ]
    answers: dict[str, list] = {str(t.pk): [] for t in targets}
    for queried in query_all(jobs, policy, at=cycle.timestamp()):
        answers[queried.key].append(queried)
    return [_prometheus_outcome(target, answers[str(target.pk)], cycle) for target in targets]


def _prometheus_outcome(target: Target, done: list, cycle: datetime) -> PollOutcome:
    if not done:
        return PollOutcome(
            target_id=target.pk,
            ok=False,
            error_kind="no-queries",
            error="no PromQL queries configured for this Prometheus target",
        )
    latency = max(q.latency_s for q in done)
    good = [(q.name, q.result) for q in done if q.result is not None]
    if not good:
        first = next(q.error for q in done if q.error is not None)
        return PollOutcome(
            target_id=target.pk,
            ok=False,
            latency_s=latency,
            error_kind=first.kind,
            error=str(first),
            transient=first.transient,
        )
    kind = kind_of(target.kind)
    assert kind.observe is not None  # a Fetch.PROMQL kind has an observer
    seen = kind.observe(Read(good, at=cycle, epoch=cycle.timestamp()))
    errors = {q.name: str(q.error) for q in done if q.error is not None}
    return PollOutcome(
        target_id=target.pk,
        ok=True,
        latency_s=latency,
        snapshot={**seen.snapshot, "errors": errors},
        observations=seen.observations,
    )


def _url(target: Target) -> str:
    return kind_of(target.kind).url(target.url, target.log_offset)


# Rows of this process's recent engine polls (see probes.window); one per worker process.
RECENT = window.Recent()
# Rows of targets not polled for this long are dropped (deleted or disabled targets).
FORGET_AFTER_S = 600.0


def _history(targets: list[Target], cycle: datetime) -> dict:
    """Earlier polls inside the window, oldest first, for windowed statistics: each as a
    row kept by this process when it has one, else its snapshot read from the database.

    Which polls exist is asked of the database every cycle (keys only), so a poll made by
    another process, or one deleted since, is never missed or used."""
    windowed_targets = [t for t in targets if kind_of(t.kind).windowed]
    if not windowed_targets:
        return {}
    since = cycle - timedelta(seconds=WINDOW_S + 1)
    polls = Poll.objects.filter(
        target__in=windowed_targets, ok=True, cycle_at__gte=since, cycle_at__lt=cycle
    )
    wanted: dict = {t.pk: [] for t in windowed_targets}
    cycle_of: dict[float, datetime] = {}  # each stamp's datetime as the database has it
    for target_id, at in polls.order_by("cycle_at").values_list("target_id", "cycle_at"):
        ts = at.timestamp()
        cycle_of.setdefault(ts, at)
        wanted[target_id].append(ts)
    missing, stamps = RECENT.missing(wanted)
    if missing:
        times = [cycle_of[ts] for ts in sorted(stamps)]
        loaded = polls.filter(target__in=missing, cycle_at__in=times).values_list(
            "target_id", "cycle_at", "snapshot"
        )
        for target_id, at, snapshot in loaded:
            RECENT.keep(target_id, at.timestamp(), window.to_row(snapshot))
    RECENT.forget_older_than(since.timestamp() - FORGET_AFTER_S)
    return RECENT.history(wanted)


def _keep_recent(cycle: datetime, outcomes: list[PollOutcome], targets: list[Target]) -> None:
    """After the cycle is stored: keep its good engine snapshots for the next cycles."""
    windowed_ids = {t.pk for t in targets if kind_of(t.kind).windowed}
    ts = cycle.timestamp()
    for outcome in outcomes:
        if outcome.ok and outcome.target_id in windowed_ids:
            RECENT.keep(outcome.target_id, ts, window.to_row(outcome.snapshot))


def _outcome(target: Target, fetched, history: list, cycle: datetime) -> PollOutcome:
    base = {"target_id": target.pk, "latency_s": fetched.latency_s}
    if fetched.error is not None:
        error = fetched.error
        return PollOutcome(
            **base, ok=False, error_kind=error.kind, error=str(error), transient=error.transient
        )
    body = fetched.result.body
    base["size_bytes"] = len(body)
    kind = kind_of(target.kind)
    try:
        following = (
            kind.next_offset(target.log_offset, body, fetched.result.headers)
            if kind.follows
            else None
        )
    except logfile.LogOffsetError as exc:  # the stored offset (and other targets) untouched
        return PollOutcome(**base, ok=False, error_kind=exc.kind, error=str(exc)[:500])
    return _observed(target, body, cycle, history, base, following)


def _observed(
    target: Target,
    body,
    cycle: datetime,
    history: list,
    base: dict,
    next_offset: int | None,
) -> PollOutcome:
    """What the target's kind observed in ``body``, as this cycle's outcome."""
    kind = kind_of(target.kind)
    if kind.observe is None:
        return _unsupported(target, base)
    read = Read(
        body,
        at=cycle,
        epoch=cycle.timestamp(),
        window_s=WINDOW_S,
        history=history,
        previous=_previous_snapshot(target, cycle) if kind.follows else {},
    )
    try:
        seen = kind.observe(read)
    except kind.unusable as exc:
        # "no-engine-series" (EngineScrapeUnusable) says the answer was read but empty.
        error_kind = getattr(exc, "kind", "malformed")
        return PollOutcome(**base, ok=False, error_kind=error_kind, error=str(exc)[:500])
    return PollOutcome(
        **base, ok=True, snapshot=seen.snapshot, observations=seen.observations,
        log_offset=next_offset,
    )  # fmt: skip


def _unsupported(target: Target, base: dict) -> PollOutcome:
    return PollOutcome(
        **base,
        ok=False,
        error_kind="unsupported",
        error=f"{target.get_kind_display()} is not polled by this version",
    )


def _previous_snapshot(target: Target, cycle: datetime) -> dict:
    """The last good poll's snapshot before ``cycle``, however long ago: a followed
    stream's state (partial line, warm-up seen) must survive a gap in polling."""
    return (
        Poll.objects.filter(target=target, ok=True, cycle_at__lt=cycle)
        .order_by("-cycle_at")
        .values_list("snapshot", flat=True)
        .first()
    ) or {}
