"""Creating and editing deployments: commanders only (the budget decides what evaluation
calls normal). Thin: authorise through ``access``, call one action, render."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from deployments import actions, calibration, proposals
from deployments.access import get_deployment
from deployments.forms import BUDGET_FIELDS, DeploymentForm, NewDeploymentForm
from teams.access import teams_of
from teams.models import Role


@require_http_methods(["GET", "POST"])
def create_deployment(request: HttpRequest) -> HttpResponse:
    teams = teams_of(request.user, Role.COMMANDER)
    if not teams.exists():
        raise PermissionDenied("Creating a deployment needs the commander role in a team.")
    form = NewDeploymentForm(request.POST or None, teams=teams)
    if request.method == "POST":
        if form.is_valid():
            deployment = actions.create_deployment(form=form, user=request.user)
            messages.success(request, f"Deployment {deployment.name} created.")
            return redirect("investigations:deployment", deployment_id=deployment.pk)
        return _render(request, form, None, status=400)
    return _render(request, form, None)


@require_http_methods(["GET", "POST"])
def edit_deployment(request: HttpRequest, deployment_id) -> HttpResponse:
    deployment = get_deployment(request.user, deployment_id, Role.COMMANDER)
    if request.method == "GET" and request.GET.get("fill") == "engine":
        return _fill_from_engine(request, deployment)
    if request.method == "GET" and "calibrate" in request.GET:
        return _calibrate(request, deployment)
    form = DeploymentForm(request.POST or None, instance=deployment)
    if request.method == "POST":
        if form.is_valid():
            actions.update_deployment(form=form, user=request.user)
            messages.success(request, f"Deployment {deployment.name} saved.")
            return redirect("investigations:deployment", deployment_id=deployment.pk)
        return _render(request, form, deployment, status=400)
    return _render(request, form, deployment)


def _fill_from_engine(request: HttpRequest, deployment) -> HttpResponse:
    """The edit form with the engine's report filled in, and what changed beside it: the
    commander accepts by saving (an audited edit, like any other); nothing is saved here."""
    report = proposals.reported(deployment.pk)
    proposed = proposals.propose(deployment, report)
    form = DeploymentForm(instance=deployment, initial={p.field: p.value for p in proposed})
    labels = {f.name: f.label for f in form}
    return _render(
        request,
        form,
        deployment,
        filled={
            "proposals": [(labels.get(p.field, p.field), p) for p in proposed],
            "notes": proposals.notes(report),
        },
    )


CALIBRATE_MINUTES = 30
CALIBRATE_MAX_MINUTES = 7 * 24 * 60


def _calibrate(request: HttpRequest, deployment) -> HttpResponse:
    """The edit form with the constants the engine cannot report proposed from the
    deployment's own observations over the last N minutes, each beside where it came
    from; a constant without enough readings keeps its value and says why. Accepting is
    saving the form (an audited edit); nothing is saved here."""
    try:
        minutes = int(request.GET.get("calibrate") or CALIBRATE_MINUTES)
    except ValueError:
        minutes = CALIBRATE_MINUTES
    minutes = min(max(minutes, 1), CALIBRATE_MAX_MINUTES)
    end = timezone.now()
    start = end - timedelta(minutes=minutes)
    estimates = calibration.propose(
        calibration.read(deployment.pk, start, end),
        start=start.timestamp(),
        end=end.timestamp(),
        ttft_target_ms=deployment.ttft_target_ms,
        itl_ceiling_ms=deployment.itl_ceiling_ms,
        prefill_ms_per_token=deployment.prefill_ms_per_token,
    )
    form = DeploymentForm(
        instance=deployment, initial={e.field: e.value for e in estimates if e.proposed}
    )
    labels = {f.name: f.label for f in form}
    return _render(
        request,
        form,
        deployment,
        calibrated={
            "minutes": minutes,
            "start": start,
            "end": end,
            "estimates": [(labels.get(e.field, e.field), e) for e in estimates],
            "any": any(e.proposed for e in estimates),
        },
    )


def _render(
    request,
    form,
    deployment,
    status: int = 200,
    filled: dict | None = None,
    calibrated: dict | None = None,
) -> HttpResponse:
    return render(
        request,
        "deployments/form.html",
        {
            "form": form,
            "deployment": deployment,
            "identity_fields": [f for f in form if f.name not in BUDGET_FIELDS],
            "budget_fields": [f for f in form if f.name in BUDGET_FIELDS],
            "filled": filled,
            "calibrated": calibrated,
            "calibrate_minutes": calibrated["minutes"] if calibrated else CALIBRATE_MINUTES,
        },
        status=status,
    )
