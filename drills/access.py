"""Fetching drill rows on behalf of a user (see teams.access for the rules)."""

from __future__ import annotations

from django.http import Http404

from drills.models import Drill, DrillRange
from teams.access import authorize
from teams.models import Role


def get_range(user, range_id, minimum: Role = Role.VIEWER) -> DrillRange:
    """A range of one of the user's teams: 404 for outsiders, 403 if the role is too low."""
    try:
        drill_range = DrillRange.objects.select_related("deployment", "team").get(pk=range_id)
    except (DrillRange.DoesNotExist, ValueError):
        raise Http404 from None
    authorize(user, drill_range.team_id, minimum)
    return drill_range


def get_drill(user, drill_id, minimum: Role = Role.VIEWER) -> Drill:
    try:
        drill = Drill.objects.select_related(
            "range__team", "range__deployment", "investigation", "started_by", "finished_by"
        ).get(pk=drill_id)
    except (Drill.DoesNotExist, ValueError):
        raise Http404 from None
    authorize(user, drill.range.team_id, minimum)
    return drill


def ranges_of(user):
    return DrillRange.objects.filter(team__memberships__user=user).select_related(
        "deployment", "team"
    )


def drills_of(user):
    return Drill.objects.filter(range__team__memberships__user=user).select_related(
        "range__deployment", "range__team", "investigation", "started_by"
    )
