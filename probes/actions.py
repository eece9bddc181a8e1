"""Changes to probe targets: each is one transaction with its audit entry (targets decide
where workers connect, so who pointed them where is kept)."""

from __future__ import annotations

from django.db import transaction

import audit
from probes.forms import TargetForm
from probes.models import Target


@transaction.atomic
def add_target(*, form: TargetForm, user) -> Target:
    """Save a validated ``TargetForm`` (its instance carries the deployment)."""
    target = form.save()
    deployment = target.deployment
    audit.record(
        "target.create",
        actor=user,
        team=deployment.team_id,
        obj=target,
        summary=f"Added {target} to {deployment.name}",
        data={"kind": target.kind, "url": target.url, "path": target.path},
    )
    return target


@transaction.atomic
def set_enabled(*, target: Target, enabled: bool, user) -> Target:
    target.enabled = enabled
    target.save(update_fields=["enabled"])
    deployment = target.deployment
    audit.record(
        "target.enable" if enabled else "target.disable",
        actor=user,
        team=deployment.team_id,
        obj=target,
        summary=f"{'Enabled' if enabled else 'Disabled'} {target} on {deployment.name}",
        data={"kind": target.kind, "url": target.url},
    )
    return target
