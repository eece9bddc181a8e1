"""Which polls are due. Deployments whose polling is active get polled; idle ones don't.

``Deployment.polling_active`` is the one thing read about the deployment's state: the
layer above (investigations) keeps it true while an investigation is open."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from deployments.models import Deployment
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
    """Deployments with polling active whose current cycle has not been polled yet.

    Beat may tick several times per cycle; a cycle with any recorded poll for the
    deployment's HTTP targets is not dispatched again (the unique key would make
    it harmless, this just saves the messages).
    """
    deployments = {
        pk: (cycle_start(now, interval), interval)
        for pk, interval in Deployment.objects.filter(polling_active=True).values_list(
            "pk", "poll_interval_s"
        )
    }
    targets = list(
        Target.objects.filter(
            deployment_id__in=deployments, enabled=True, kind__in=HTTP_KINDS + HOST_KINDS
        ).values_list("pk", "deployment_id", "kind", "host_queue")
    )
    polled = set(
        Poll.objects.filter(
            target_id__in=[pk for pk, *_ in targets],
            cycle_at__in={cycle for cycle, _ in deployments.values()},
        ).values_list("target_id", "cycle_at")
    )
    by_deployment: dict = {}
    for pk, deployment_id, kind, queue in targets:
        if (pk, deployments[deployment_id][0]) not in polled:
            by_deployment.setdefault(deployment_id, []).append((pk, kind, queue))
    due = []
    for deployment_id, pending in by_deployment.items():
        cycle, interval = deployments[deployment_id]
        http_due = any(kind in HTTP_KINDS for _, kind, _ in pending)
        host_due = tuple((pk, queue) for pk, kind, queue in pending if kind in HOST_KINDS)
        due.append(DuePoll(deployment_id, cycle, interval, host_due, http_due))
    return due
