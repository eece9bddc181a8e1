"""Registering what discovery found: a deployment with its engines' targets, or the targets
a Prometheus lists. Each goes through the same form and action as a target typed by hand
(``probes.forms.TargetForm``: URL checks, the network guard's refusals; ``probes.actions``:
one audit entry per target), inside one transaction, so a refused target leaves nothing
half-registered."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from django.db import transaction

from deployments import actions as deployment_actions
from deployments.forms import NewDeploymentForm
from deployments.models import Deployment
from probes import actions
from probes.forms import TargetForm
from probes.models import Target


@dataclass(frozen=True)
class Wanted:
    """One target to register, as plain values."""

    kind: str
    url: str
    replica: str = ""
    queries: Mapping[str, str] = field(default_factory=dict)

    def form_data(self) -> dict[str, str]:
        lines = "\n".join(f"{name} = {promql}" for name, promql in self.queries.items())
        return {"kind": self.kind, "url": self.url, "replica": self.replica, "queries_text": lines}


class TargetRefused(Exception):
    """A target did not pass the form the commander would have used by hand."""

    def __init__(self, wanted: Wanted, errors: list[str]) -> None:
        super().__init__(f"{wanted.url}: {'; '.join(errors)}")
        self.wanted = wanted
        self.errors = errors


def _add(deployment: Deployment, wanted: Wanted, user) -> Target:
    form = TargetForm(wanted.form_data(), instance=Target(deployment=deployment))
    if not form.is_valid():
        errors = [str(e) for errs in form.errors.values() for e in errs]
        raise TargetRefused(wanted, errors)
    return actions.add_target(form=form, user=user)


@transaction.atomic
def create_with_targets(
    *, form: NewDeploymentForm, targets: Sequence[Wanted], user
) -> tuple[Deployment, list[Target]]:
    """Create the deployment from a validated form and register its targets; raises
    ``TargetRefused`` (and saves nothing) when one is refused."""
    deployment = deployment_actions.create_deployment(form=form, user=user)
    return deployment, [_add(deployment, wanted, user) for wanted in targets]


@transaction.atomic
def register(*, deployment: Deployment, targets: Sequence[Wanted], user) -> list[Target]:
    """Register targets on an existing deployment (all or, on ``TargetRefused``, none)."""
    return [_add(deployment, wanted, user) for wanted in targets]
