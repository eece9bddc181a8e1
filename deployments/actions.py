"""Creating and editing deployments: one transaction with its audit entry each, because
the budget decides what evaluation calls normal and who changed it must be on record."""

from __future__ import annotations

from django.db import transaction

import audit
from deployments.forms import DeploymentForm
from deployments.models import Deployment


@transaction.atomic
def create_deployment(*, form: DeploymentForm, user) -> Deployment:
    """Save a validated form whose ``team`` the caller has authorised (commander)."""
    deployment = form.save()
    audit.record(
        "deployment.create",
        actor=user,
        team=deployment.team_id,
        obj=deployment,
        summary=f"Created deployment {deployment.name}",
        data={"engine": deployment.engine, "budget": _budget(deployment)},
    )
    return deployment


@transaction.atomic
def update_deployment(*, form: DeploymentForm, user) -> Deployment:
    """Save a validated edit; the audit entry lists each changed field, before and after."""
    before = Deployment.objects.select_for_update().get(pk=form.instance.pk)
    deployment = form.save()
    changed = {
        name: [getattr(before, name), getattr(deployment, name)]
        for name in form.changed_data
        if getattr(before, name) != getattr(deployment, name)
    }
    audit.record(
        "deployment.update",
        actor=user,
        team=deployment.team_id,
        obj=deployment,
        summary=f"Changed {', '.join(sorted(changed)) or 'nothing'} on {deployment.name}",
        data={"changed": changed},
    )
    return deployment


def _budget(deployment: Deployment) -> dict:
    from dataclasses import asdict

    return asdict(deployment.budget)
