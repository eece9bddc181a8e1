"""Drill pages. Thin: authorise through ``access``, call one action or the scorer, render."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from drills import actions, catalogue, simctl
from drills.access import drills_of, get_drill, get_range, ranges_of
from drills.forms import StartDrillForm
from drills.scoring import score
from enginesim import scenarios
from investigations.playbook import get_playbook
from teams.models import Membership, Role


@require_GET
def drill_list(request: HttpRequest) -> HttpResponse:
    can_start = set(
        Membership.objects.filter(
            user=request.user, role__in=[Role.COMMANDER, Role.RESPONDER]
        ).values_list("team_id", flat=True)
    )
    ranges = list(ranges_of(request.user))
    active = {d.range_id: d for d in drills_of(request.user).filter(finished_at__isnull=True)}
    return render(
        request,
        "drills/list.html",
        {
            "ranges": [(r, r.team_id in can_start, active.get(r.pk)) for r in ranges],
            "drills": drills_of(request.user)[:100],
            "form": StartDrillForm(),
        },
    )


@require_POST
def start(request: HttpRequest, range_id) -> HttpResponse:
    drill_range = get_range(request.user, range_id, Role.RESPONDER)
    form = StartDrillForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Pick an incident (or random) and a seed of 0 or more.")
        return redirect("drills:list")
    try:
        drill = actions.start_drill(
            drill_range=drill_range,
            choice=form.cleaned_data["scenario"],
            user=request.user,
            seed=form.cleaned_data["seed"],
        )
    except (actions.DrillBusy, simctl.SimulatorError, catalogue.UnknownScenario) as exc:
        messages.error(request, str(exc))
        return redirect("drills:list")
    messages.success(request, "Drill started: investigate it like a real incident.")
    return redirect("investigations:detail", investigation_id=drill.investigation_id)


@require_GET
def detail(request: HttpRequest, drill_id) -> HttpResponse:
    """While it runs: a pointer to the investigation. Once finished: the scenario and the
    trainee's decisions against its ground truth."""
    drill = get_drill(request.user, drill_id)
    context = {
        "drill": drill,
        "can_finish": Membership.objects.filter(
            team_id=drill.range.team_id,
            user=request.user,
            role__in=[Role.COMMANDER, Role.RESPONDER],
        ).exists(),
    }
    if drill.finished:
        investigation = drill.investigation
        result = score(
            get_playbook(investigation.symptom),
            actions.decision_records(investigation),
            drill.truth_causes,
            drill.started_at,
        )
        context.update(result=result, summary=_summary(drill.scenario))
    return render(request, "drills/detail.html", context)


@require_POST
def finish(request: HttpRequest, drill_id) -> HttpResponse:
    drill = get_drill(request.user, drill_id, Role.RESPONDER)
    try:
        actions.finish_drill(drill=drill, user=request.user)
    except ValueError as exc:
        messages.error(request, str(exc))
    return redirect("drills:detail", drill_id=drill.pk)


def _summary(name: str) -> str:
    try:
        return scenarios.get(name).summary
    except KeyError:
        return ""
