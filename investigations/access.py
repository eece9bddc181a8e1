"""Fetching investigation-domain rows on behalf of a user (see teams.access for the rules)."""

from __future__ import annotations

from django.http import Http404

from teams.access import authorize
from teams.models import Role


def get_investigation(user, investigation_id, minimum: Role = Role.VIEWER):
    """An investigation of one of the user's teams: 404 for outsiders, 403 if the role is
    too low for the action."""
    from investigations.models import Investigation

    try:
        investigation = Investigation.objects.select_related("deployment", "team").get(
            pk=investigation_id
        )
    except (Investigation.DoesNotExist, ValueError):
        raise Http404 from None
    authorize(user, investigation.team_id, minimum)
    return investigation
