"""Writing what a poll found: idempotent, bulk, and one transaction per batch.

Preconditions: the caller holds the claim on the targets (``claim_targets``).
Idempotency: ``Poll`` is unique per (target, cycle) and ``Observation`` per
(target, signal, labels, time); inserts ignore conflicts, so a task redelivered
after its worker died writes each row at most once and loses none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from probes.models import Observation, Poll, Target


@dataclass(frozen=True)
class PollOutcome:
    target_id: object
    ok: bool
    latency_s: float | None = None
    size_bytes: int | None = None
    error_kind: str = ""
    error: str = ""
    transient: bool = False
    snapshot: dict = field(default_factory=dict)
    observations: Sequence[tuple[str, str, float]] = ()  # (signal, labels, value)
    log_offset: int | None = None


def claim_targets(
    target_ids: Iterable, task_id: str, *, lease: timedelta, now: datetime | None = None
) -> list:
    """Claim targets for one task with a conditional UPDATE; return the ids it now holds.

    A target is free when its lease ran out, or when the claim is this very task's
    (a redelivered message has the same id, and must be able to finish the job).
    """
    now = now or timezone.now()
    ids = list(target_ids)
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now) | Q(claim_task=task_id)
    with transaction.atomic():
        Target.objects.filter(free, pk__in=ids).update(
            claim_task=task_id, claimed_until=now + lease
        )
        return list(
            Target.objects.filter(pk__in=ids, claim_task=task_id).values_list("pk", flat=True)
        )


def release_targets(target_ids: Iterable, task_id: str) -> None:
    Target.objects.filter(pk__in=list(target_ids), claim_task=task_id).update(
        claim_task="", claimed_until=None
    )


def already_polled(target_ids: Iterable, cycle_at: datetime) -> set:
    return set(
        Poll.objects.filter(target_id__in=list(target_ids), cycle_at=cycle_at).values_list(
            "target_id", flat=True
        )
    )


@transaction.atomic
def record_cycle(cycle_at: datetime, outcomes: Sequence[PollOutcome]) -> int:
    """Store one cycle's outcomes; returns how many polls were new (0 on a replay)."""
    polls = [
        Poll(
            target_id=o.target_id,
            cycle_at=cycle_at,
            ok=o.ok,
            error_kind=o.error_kind[:32],
            error=o.error[:500],
            transient=o.transient,
            latency_ms=None if o.latency_s is None else round(o.latency_s * 1000, 3),
            size_bytes=o.size_bytes,
            snapshot=o.snapshot,
        )
        for o in outcomes
    ]
    before = Poll.objects.filter(
        cycle_at=cycle_at, target_id__in=[o.target_id for o in outcomes]
    ).count()
    Poll.objects.bulk_create(polls, ignore_conflicts=True)
    Observation.objects.bulk_create(
        [
            Observation(
                target_id=o.target_id, taken_at=cycle_at, signal=signal, labels=labels, value=value
            )
            for o in outcomes
            if o.ok
            for signal, labels, value in o.observations
        ],
        ignore_conflicts=True,
        batch_size=2000,
    )
    _update_health(outcomes, timezone.now())
    return len(polls) - before


COMMON_HEALTH = ["last_polled_at", "last_latency_ms", "last_size_bytes"]
OK_HEALTH = [*COMMON_HEALTH, "last_success_at", "consecutive_failures"]
FAILED_HEALTH = [
    *COMMON_HEALTH,
    "last_error_at",
    "last_error",
    "last_error_kind",
    "last_error_transient",
    "consecutive_failures",
]


def _update_health(outcomes: Sequence[PollOutcome], now: datetime) -> None:
    """The health strip's fields, in at most three statements per cycle whatever the
    number of targets (one UPDATE each would dominate a cycle of a thousand polls)."""
    ok, ok_with_offset, failed = [], [], []
    for o in outcomes:
        target = Target(
            pk=o.target_id,
            last_polled_at=now,
            last_latency_ms=None if o.latency_s is None else round(o.latency_s * 1000, 3),
            last_size_bytes=o.size_bytes,
        )
        if o.ok:
            target.last_success_at = now
            target.consecutive_failures = 0
            if o.log_offset is None:
                ok.append(target)
            else:
                target.log_offset = o.log_offset
                ok_with_offset.append(target)
        else:
            target.last_error_at = now
            target.last_error = o.error[:500]
            target.last_error_kind = o.error_kind[:32]
            target.last_error_transient = o.transient
            target.consecutive_failures = F("consecutive_failures") + 1
            failed.append(target)
    for targets, fields in (
        (ok, OK_HEALTH),
        (ok_with_offset, [*OK_HEALTH, "log_offset"]),
        (failed, FAILED_HEALTH),
    ):
        if targets:
            Target.objects.bulk_update(targets, fields, batch_size=500)
