"""Fetching postmortem rows on behalf of a user, through the investigation they belong to
(see teams.access for the rules: outsiders 404, too-low roles 403)."""

from __future__ import annotations

from django.http import Http404

from investigations.access import get_investigation
from postmortems.models import ActionItem, Export
from teams.models import Role


def get_export(user, investigation_id, export_id, minimum: Role = Role.VIEWER):
    """(investigation, export) of one of the user's teams; 404 for outsiders and for an
    export of another investigation."""
    investigation = get_investigation(user, investigation_id, minimum)
    try:
        export = Export.objects.select_related("postmortem").get(
            pk=export_id, postmortem__investigation=investigation, team_id=investigation.team_id
        )
    except (Export.DoesNotExist, ValueError):
        raise Http404 from None
    return investigation, export


def get_action_item(user, investigation_id, item_id, minimum: Role = Role.RESPONDER):
    investigation = get_investigation(user, investigation_id, minimum)
    try:
        item = ActionItem.objects.get(pk=item_id, postmortem__investigation=investigation)
    except (ActionItem.DoesNotExist, ValueError):
        raise Http404 from None
    return investigation, item
