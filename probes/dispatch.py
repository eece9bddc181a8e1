"""Which polls are due. Deployments whose polling is active are polled at their own cadence;
every other deployment's enabled targets are polled at the light cadence.

``Deployment.polling_active`` is the one thing read about the deployment's state: the
layer above (investigations) keeps it true while an investigation is open. The light
cadence exists so that an investigation opened after the peak still sees the minutes
before it (the existing retention keeps them: an hour before each investigation opens).
Light polls are marked ``light``: the layer above stores them without evaluating
anything, since nothing is open to evaluate. Prometheus targets are left out of the light
cadence: Prometheus keeps its own history, which opening an investigation backfills.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from deployments.models import Deployment
from probes.cycles import cycle_start
from probes.models import HOST_KINDS, HTTP_KINDS, Poll, Target, TargetKind


@dataclass(frozen=True)
class DuePoll:
    deployment_id: object
    cycle_at: datetime
    interval_s: int
    host_targets: tuple[tuple[object, str], ...]  # (target id, host queue)
    has_http_targets: bool
    light: bool = False  # the idle cadence: store only, evaluate nothing


def cadence(active: bool, interval_s: int, light_s: int) -> int | None:
    """Seconds between polls: the deployment's own while active, else the light cadence
    (never faster than its own; None when light polling is off)."""
    if active:
        return interval_s
    return max(light_s, interval_s) if light_s > 0 else None


def due_polls(now: datetime, *, light_s: int | None = None) -> list[DuePoll]:
    """Deployments whose current cycle (at their cadence) has not been polled yet.

    Beat may tick several times per cycle; a cycle with any recorded poll for the
    deployment's HTTP targets is not dispatched again (the unique key would make
    it harmless, this just saves the messages).
    """
    light_s = settings.ATLAS_LIGHT_POLL_SECONDS if light_s is None else light_s
    deployments = {}
    for pk, interval, active in Deployment.objects.values_list(
        "pk", "poll_interval_s", "polling_active"
    ):
        every = cadence(active, interval, light_s)
        if every is not None:
            deployments[pk] = (cycle_start(now, every), every, active)
    targets = [
        row
        for row in Target.objects.filter(
            deployment_id__in=deployments, enabled=True, kind__in=HTTP_KINDS + HOST_KINDS
        ).values_list("pk", "deployment_id", "kind", "host_queue")
        if deployments[row[1]][2] or row[2] != TargetKind.PROMETHEUS
    ]
    polled = set(
        Poll.objects.filter(
            target_id__in=[pk for pk, *_ in targets],
            cycle_at__in={cycle for cycle, _, _ in deployments.values()},
        ).values_list("target_id", "cycle_at")
    )
    by_deployment: dict = {}
    for pk, deployment_id, kind, queue in targets:
        if (pk, deployments[deployment_id][0]) not in polled:
            by_deployment.setdefault(deployment_id, []).append((pk, kind, queue))
    due = []
    for deployment_id, pending in by_deployment.items():
        cycle, interval, active = deployments[deployment_id]
        http_due = any(kind in HTTP_KINDS for _, kind, _ in pending)
        host_due = tuple((pk, queue) for pk, kind, queue in pending if kind in HOST_KINDS)
        due.append(DuePoll(deployment_id, cycle, interval, host_due, http_due, not active))
    return due
