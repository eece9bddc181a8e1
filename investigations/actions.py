"""Changes to investigations: each action is one transaction with its side effects."""

from __future__ import annotations

from django.db import transaction

from investigations.models import Deployment, Investigation
from investigations.playbook import get_playbook
from probes.models import Target, TargetKind


@transaction.atomic
def open_investigation(
    *, deployment: Deployment, symptom: str, user, title: str = ""
) -> Investigation:
    """Open an investigation from a symptom. Its playbook's PromQL is installed on the
    deployment's Prometheus targets, so the next poll cycle already collects it; polling
    itself starts because the deployment now has an open investigation."""
    playbook = get_playbook(symptom)
    investigation = Investigation.objects.create(
        team=deployment.team,
        deployment=deployment,
        symptom=symptom,
        title=title or f"{playbook.title} on {deployment.name}",
        opened_by=user,
    )
    queries = {m.signal: m.promql for m in playbook.measures() if m.source == "prometheus"}
    if queries:
        for target in Target.objects.select_for_update().filter(
            deployment=deployment, kind=TargetKind.PROMETHEUS
        ):
            target.queries = {**(target.queries or {}), **queries}
            target.save(update_fields=["queries"])
    return investigation
