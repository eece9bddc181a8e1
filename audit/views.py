"""Audit pages: an investigation's log (any member) and a team's log (commanders)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from audit import log
from audit.models import Action
from investigations.access import get_investigation
from teams.access import authorize
from teams.models import Role


@require_GET
def investigation_log(request: HttpRequest, investigation_id) -> HttpResponse:
    """The investigation's entries alone (the partial the investigation page includes)."""
    investigation = get_investigation(request.user, investigation_id)
    return render(
        request,
        "audit/_investigation_log.html",
        {"investigation": investigation, "audit_entries": log.for_investigation(investigation)},
    )


@require_GET
def team_log(request: HttpRequest, team_id) -> HttpResponse:
    membership = authorize(request.user, team_id, Role.COMMANDER)
    action = request.GET.get("action", "")
    if action not in Action.values:
        action = ""
    return render(
        request,
        "audit/team.html",
        {
            "team": membership.team,
            "entries": log.for_team(membership.team, action=action),
            "actions": Action.choices,
            "action": action,
        },
    )
