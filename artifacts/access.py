"""Fetching artifacts on behalf of a user (see teams.access for the rules)."""

from __future__ import annotations

from django.http import Http404

from artifacts.models import Artifact
from teams.access import authorize
from teams.models import Role


def get_artifact(user, artifact_id, minimum: Role = Role.VIEWER) -> Artifact:
    """404 for outsiders (and unknown ids), 403 if the role is too low."""
    try:
        artifact = Artifact.objects.select_related(
            "deployment", "investigation", "duplicate_of"
        ).get(pk=artifact_id)
    except (Artifact.DoesNotExist, ValueError):
        raise Http404 from None
    authorize(user, artifact.team_id, minimum)
    return artifact
