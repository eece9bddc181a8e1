"""History before the alarm: what opening an investigation backfills from Prometheus.

Nothing evaluates a deployment before an investigation opens, and an investigation is
often opened minutes after the peak: the checks' windows would then hold only the
recovery, and every cause would read "suggests eliminate". Engines and GPUs are polled at
the light cadence all the time (``probes.dispatch``); a Prometheus server keeps its own
history, so at open each of the playbook's PromQL measures is range-queried over its
window before the open (at least the chart's lead, so the charts show those minutes too),
on the deployment's poll grid, and stored as ordinary observations at their own times.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from celery import current_app

from investigations.models import Investigation
from investigations.observations import EXPECTED_INPUTS
from investigations.panels import LEAD
from investigations.playbook import Playbook, get_playbook
from probes.backfill import Backfilled, RangeJob, backfill
from probes.engine_promql import STANDS_IN
from probes.models import Target, TargetKind
from probes.policy import fetch_policy

log = logging.getLogger(__name__)


def prometheus_queries(playbook: Playbook) -> dict[str, tuple[str, int]]:
    """``signal -> (PromQL, longest window)`` a Prometheus target answers for the playbook:
    its own PromQL measures, and the engine measures Prometheus stands in for
    (``probes.engine_promql``: a deployment whose engines only Prometheus can reach),
    with the engine inputs of the evaluation's expectations. Pure."""
    queries: dict[str, tuple[str, int]] = {}
    for measure in playbook.measures():
        if measure.source == "prometheus" and measure.promql:
            promql = measure.promql
        elif measure.source == "engine" and measure.signal in STANDS_IN:
            promql = STANDS_IN[measure.signal]
        else:
            continue
        _, window = queries.get(measure.signal, ("", 0))
        queries[measure.signal] = (promql, max(window, measure.window_s))
    # The engine inputs of the evaluation's expectations (the KV the running requests
    # hold, the token rates), which no measure names.
    for signal, window in EXPECTED_INPUTS.items():
        if signal in STANDS_IN:
            _, had = queries.get(signal, ("", 0))
            queries[signal] = (STANDS_IN[signal], max(had, window))
    return queries


def backfill_jobs(
    playbook: Playbook, *, opened_at: float, step_s: float, lead_s: float = 0.0
) -> list[RangeJob]:
    """One range query per signal a Prometheus target answers for the playbook (its PromQL
    measures and the engine signals it stands in for), over its longest window (or
    ``lead_s``, if longer) before ``opened_at``, starting on the ``step_s`` grid so the
    points fall where live polls would have. Pure."""
    jobs = []
    for signal, (promql, window) in sorted(prometheus_queries(playbook).items()):
        span = max(float(window), lead_s)
        start = math.floor((opened_at - span) / step_s) * step_s
        jobs.append(RangeJob(signal, promql, start, opened_at, float(step_s)))
    return jobs


def prometheus_targets(deployment_id) -> Iterable[Target]:
    return Target.objects.filter(
        deployment_id=deployment_id, kind=TargetKind.PROMETHEUS, enabled=True
    ).order_by("pk")


def schedule(investigation_id) -> None:
    """After the open commits, ask a worker to backfill (the open does not wait on
    Prometheus). A broker that is down costs the backfill, never the open: the live polls
    still start, and the failure is logged."""
    try:
        current_app.send_task("investigations.backfill_history", args=[str(investigation_id)])
    except Exception:
        log.exception("investigation.backfill.not-sent", extra={"id": str(investigation_id)})


def backfill_investigation(investigation_id) -> list[Backfilled]:
    """Backfill every Prometheus target of the investigation's deployment; one result per
    target. Failed queries are logged with Prometheus's message and written nowhere: the
    live polls from the open onwards are the evidence then (absence is not evidence)."""
    investigation = (
        Investigation.objects.select_related("deployment").filter(pk=investigation_id).first()
    )
    if investigation is None:  # deleted before a worker got to it
        return []
    jobs = backfill_jobs(
        get_playbook(investigation.symptom),
        opened_at=investigation.opened_at.timestamp(),
        step_s=investigation.deployment.poll_interval_s,
        lead_s=LEAD.total_seconds(),
    )
    if not jobs:
        return []
    done = []
    for target in prometheus_targets(investigation.deployment_id):
        result = backfill(target, jobs, fetch_policy())
        log.info(
            "investigation.backfill",
            extra={
                "id": str(investigation_id),
                "target": str(target.pk),
                "written": result.total,
                "errors": result.errors,
            },
        )
        done.append(result)
    return done
