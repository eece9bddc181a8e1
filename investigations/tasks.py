"""Orchestration: the poll cycle and the evaluation that follows it, chained here.

Probes only collect; they never call up into investigations. This module is what beat
drives: ``dispatch_polls`` enqueues the due cycles of deployments whose polling is active
(an open investigation keeps it so, see ``investigations.polling``; the others get the
light cadence, stored without evaluation), and each
``poll_and_evaluate`` stores the cycle's polls, then evaluates the deployment's open
investigations with that evidence in. Both halves are idempotent per cycle, so a
redelivered task writes nothing twice.
"""

from __future__ import annotations

from datetime import datetime

from celery import shared_task
from django.utils import timezone

from investigations.cycle import evaluate_after_poll
from investigations.history import backfill_investigation
from probes.tasks import RETRY, enqueue_due, poll_cycle


@shared_task(name="investigations.dispatch_polls")
def dispatch_polls() -> int:
    """Beat, every few seconds: enqueue the due polls; returns how many were enqueued."""
    return enqueue_due(timezone.now(), http_poll=poll_and_evaluate)


@shared_task(name="investigations.poll_and_evaluate", bind=True, **RETRY)
def poll_and_evaluate(self, deployment_id: str, cycle_at: str) -> int:
    """Poll one deployment's HTTP targets for one cycle, then evaluate its open
    investigations at that cycle; returns the polls stored."""
    cycle = datetime.fromisoformat(cycle_at)
    stored = poll_cycle(deployment_id, cycle, task_id=self.request.id)
    evaluate_after_poll(deployment_id, cycle)
    return stored


@shared_task(name="investigations.backfill_history")
def backfill_history(investigation_id: str) -> int:
    """Once, after an investigation opened: its checks' windows before the open, from the
    deployment's Prometheus targets (``investigations.history``); returns rows written.
    A replay writes nothing twice (the observations' unique key)."""
    return sum(done.total for done in backfill_investigation(investigation_id))
