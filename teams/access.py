"""The only way views fetch team-owned rows.

Outsiders get 404 (a team's existence is not disclosed), members whose role is
too low for the action get 403. Every protected object gets one function here
(or in its app's access module) built on ``authorize``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.core.exceptions import PermissionDenied
from django.http import Http404

from teams.models import ROLE_RANK, Membership, Role, Team

T = TypeVar("T")


@dataclass(frozen=True)
class Granted(Generic[T]):
    """A row the user may reach, with the membership that let them: what else they may do
    there (which forms a page shows) is answered without another query."""

    obj: T
    membership: Membership

    def allows(self, minimum: Role) -> bool:
        return self.membership.allows(minimum)


def authorize(user, team_id: uuid.UUID | str, minimum: Role = Role.VIEWER) -> Membership:
    """Return the user's membership of the team, or raise 404 (outsider) / 403 (role too low)."""
    if not getattr(user, "is_authenticated", False):
        raise Http404
    try:
        membership = Membership.objects.select_related("team").get(team_id=team_id, user=user)
    except (Membership.DoesNotExist, ValueError, TypeError):
        raise Http404 from None
    if not membership.allows(minimum):
        raise PermissionDenied(f"This needs the {minimum.label.lower()} role in {membership.team}.")
    return membership


def get_team(user, team_id: uuid.UUID | str, minimum: Role = Role.VIEWER) -> Team:
    """A team the user belongs to with at least ``minimum`` role."""
    return authorize(user, team_id, minimum).team


def memberships_of(user):
    """The user's memberships with their teams, by team name: one query gives both the
    teams to list and what the user may do in each."""
    return Membership.objects.filter(user=user).select_related("team").order_by("team__name")


def teams_of(user, minimum: Role = Role.VIEWER):
    """Teams the user belongs to with at least ``minimum`` role, for lists and pickers."""
    roles = [role for role, rank in ROLE_RANK.items() if rank >= ROLE_RANK[minimum]]
    return Team.objects.filter(memberships__user=user, memberships__role__in=roles).order_by("name")
