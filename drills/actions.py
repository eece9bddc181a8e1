"""Starting and finishing drills: each action is one transaction with its side effects."""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils import timezone

import audit
from deployments.models import Deployment
from drills import catalogue, simctl
from drills.models import Drill, DrillRange
from drills.scoring import DecisionRecord
from investigations import actions as investigation_actions
from investigations.models import Investigation
from investigations.playbook import get_playbook
from probes.models import Target, TargetKind
from probes.policy import fetch_policy

MAX_SEED = 2**31 - 1


class DrillBusy(Exception):
    """The range already runs a drill; one at a time, or the trainees share an incident."""


@transaction.atomic
def start_drill(*, drill_range: DrillRange, choice: str, user, seed: int | None = None) -> Drill:
    """Redeploy the range's simulator with the chosen incident and open a drill investigation
    titled by its symptom. The range row is locked, so two starts cannot both switch the
    simulator; a refused or unreachable simulator leaves nothing behind."""
    locked = (
        DrillRange.objects.select_for_update().select_related("deployment").get(pk=drill_range.pk)
    )
    running = (
        Drill.objects.filter(range=locked, finished_at__isnull=True)
        .select_related("started_by")
        .first()
    )
    if running is not None:
        who = running.started_by.get_username() if running.started_by else "someone"
        raise DrillBusy(
            f"A drill is already running on {locked.deployment.name} (started by {who} at "
            f"{running.started_at:%H:%M} UTC); finish it before starting another."
        )
    if seed is None:
        seed = secrets.randbelow(MAX_SEED)
    elif not 0 <= seed <= MAX_SEED:
        raise ValueError(f"the seed must be in [0, {MAX_SEED}]")
    scenario = catalogue.pick(choice, seed)
    case = catalogue.case_for(scenario)
    truth = simctl.switch_scenario(locked.simulator_url, scenario, seed, fetch_policy())
    _register_budget(locked.deployment, case.budget)
    # A redeployed engine's log starts again at offset 0.
    Target.objects.filter(deployment=locked.deployment, kind=TargetKind.LOG_HTTP).update(
        log_offset=0
    )
    investigation = investigation_actions.open_investigation(
        deployment=locked.deployment,
        symptom=case.symptom,
        user=user,
        title=f"Drill: {get_playbook(case.symptom).title}",
    )
    investigation.is_drill = True
    investigation.save(update_fields=["is_drill"])
    drill = Drill.objects.create(
        range=locked,
        investigation=investigation,
        scenario=scenario,
        truth_causes=list(truth["causes"]),
        seed=seed,
        started_by=user,
    )
    # The scenario stays out of the entry: the trainee can read the investigation's log.
    audit.record(
        "drill.start",
        actor=user,
        investigation=investigation,
        obj=drill,
        summary=f"Drill started on {locked.deployment.name}",
    )
    return drill


def _register_budget(deployment: Deployment, budget: dict) -> None:
    """The range's budget as the incident's engine is configured (defaults elsewhere)."""
    changed = []
    for name in sorted(catalogue.BUDGET_FIELDS):
        value = budget.get(name, Deployment._meta.get_field(name).default)
        if getattr(deployment, name) != value:
            setattr(deployment, name, value)
            changed.append(name)
    if changed:
        deployment.save(update_fields=changed)


@transaction.atomic
def finish_drill(*, drill: Drill, user) -> Drill:
    """End the drill now: its investigation is closed (with the reason recorded) and the
    ground truth is revealed on the drill's page."""
    locked = Drill.objects.select_for_update().select_related("investigation").get(pk=drill.pk)
    if locked.finished_at is not None:
        raise ValueError("this drill has already finished")
    if locked.investigation.status == Investigation.Status.OPEN:
        investigation_actions.close_investigation(
            investigation=locked.investigation,
            user=user,
            override=f"Drill finished by {user.get_username()}",
        )
    locked.refresh_from_db(fields=["finished_at"])  # the close may have finished it
    locked.finished_at = locked.finished_at or timezone.now()
    locked.finished_by = user
    locked.save(update_fields=["finished_at", "finished_by"])
    audit.record(
        "drill.finish",
        actor=user,
        investigation=locked.investigation,
        obj=locked,
        summary=f"Drill finished; the scenario was {locked.scenario}",
    )
    return locked


def decision_records(investigation: Investigation) -> list[DecisionRecord]:
    """The investigation's decisions as the scorer reads them."""
    return [
        DecisionRecord(
            node=d.node,
            action=d.action,
            sequence=d.sequence,
            at=d.decided_at,
            by=d.decided_by.get_username() if d.decided_by else "",
            automatic=d.automatic,
        )
        for d in investigation.decisions.select_related("decided_by").order_by("sequence")
    ]
