"""Fetching deployments on behalf of a user (the rules are teams.access's)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from deployments.models import Deployment
from teams.access import Granted, authorize
from teams.models import Role


def deployment_access(user, deployment_id, minimum: Role = Role.VIEWER) -> Granted[Deployment]:
    """A deployment of one of the user's teams with the user's membership there: 404 for
    outsiders, 403 if the role is too low."""
    try:
        deployment = Deployment.objects.select_related("team", "controller").get(pk=deployment_id)
    except (Deployment.DoesNotExist, ValueError):
        raise Http404 from None
    return Granted(deployment, authorize(user, deployment.team_id, minimum))


def get_deployment(user, deployment_id, minimum: Role = Role.VIEWER) -> Deployment:
    """The deployment alone (see ``deployment_access``)."""
    return deployment_access(user, deployment_id, minimum).obj


def visible_to(user) -> QuerySet[Deployment]:
    """Deployments of the user's teams, for lists and pickers."""
    return Deployment.objects.filter(team__memberships__user=user).select_related("team")
