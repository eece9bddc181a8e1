"""Fetching investigation-domain rows on behalf of a user (see teams.access for the rules)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from investigations.models import Investigation
from teams.access import Granted, authorize
from teams.models import Role


def investigation_access(
    user, investigation_id, minimum: Role = Role.VIEWER
) -> Granted[Investigation]:
    """An investigation of one of the user's teams with the user's membership there: 404 for
    outsiders, 403 if the role is too low for the action."""
    try:
        investigation = Investigation.objects.select_related("deployment__controller", "team").get(
            pk=investigation_id
        )
    except (Investigation.DoesNotExist, ValueError):
        raise Http404 from None
    return Granted(investigation, authorize(user, investigation.team_id, minimum))


def get_investigation(user, investigation_id, minimum: Role = Role.VIEWER) -> Investigation:
    """The investigation alone (see ``investigation_access``)."""
    return investigation_access(user, investigation_id, minimum).obj


def visible_to(user) -> QuerySet[Investigation]:
    """Investigations of the user's teams, for lists."""
    return Investigation.objects.filter(team__memberships__user=user)
