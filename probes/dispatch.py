"""Which polls are due. Active investigations get polled; idle deployments don't."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from probes.cycles import cycle_start
from probes.models import HOST_KINDS, HTTP_KINDS, Poll, Target


@dataclass(frozen=True)
class DuePoll:
    deployment_id: object
    cycle_at: datetime
    interval_s: int
    host_targets: tuple[tuple[object, str], ...]  # (target id, host queue)
    has_http_targets: bool


def due_polls(now: datetime) -> list[DuePoll]:
    """Deployments with an open investigation whose current cycle has not been polled yet.

    Beat may tick several times per cycle; a cycle with any recorded poll for the
    deployment's HTTP targets is not dispatched again (the unique key would make
    it harmless, this just saves the messages).
    """
    from investigations.models import Deployment, Investigation

    deployments = Deployment.objects.filter(
        investigations__status=Investigation.Status.OPEN
    ).distinct()
    due = []
    for deployment in deployments:
        cycle = cycle_start(now, deployment.poll_interval_s)
        targets = list(
            Target.objects.filter(deployment=deployment, enabled=True).values_list(
                "pk", "kind", "host_queue"
            )
        )
        http = [pk for pk, kind, _ in targets if kind in HTTP_KINDS]
        host = tuple((pk, queue) for pk, kind, queue in targets if kind in HOST_KINDS)
        polled = set(
            Poll.objects.filter(
                target_id__in=[pk for pk, _, _ in targets], cycle_at=cycle
            ).values_list("target_id", flat=True)
        )
        http_due = any(pk not in polled for pk in http)
        host_due = tuple((pk, queue) for pk, queue in host if pk not in polled)
        if http_due or host_due:
            due.append(
                DuePoll(deployment.pk, cycle, deployment.poll_interval_s, host_due, http_due)
            )
    return due
