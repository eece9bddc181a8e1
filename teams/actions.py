"""Changes to teams. Each runs in one transaction and keeps the team commandable:
a team never loses its last commander."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

import audit
from teams.models import Membership, Role, Team


@transaction.atomic
def create_team(*, name: str, creator) -> Team:
    """Create a team; its creator is its first commander."""
    team = Team.objects.create(name=name)
    Membership.objects.create(team=team, user=creator, role=Role.COMMANDER)
    audit.record("team.create", actor=creator, team=team, obj=team, summary=f"Created {name}")
    return team


@transaction.atomic
def add_member(*, team: Team, username: str, role: Role, by=None) -> Membership:
    """Add an existing user to the team. Idempotent per (team, user): re-adding is an error."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise ValidationError(f"No active user named {username!r}.")
    if Membership.objects.filter(team=team, user=user).exists():
        raise ValidationError(f"{username} is already a member of {team}.")
    added = Membership.objects.create(team=team, user=user, role=role)
    audit.record(
        "member.add",
        actor=by,
        team=team,
        obj=added,
        summary=f"Added {username} as {Role(role).label.lower()}",
        data={"user": username, "role": str(role)},
    )
    return added


@transaction.atomic
def change_role(*, membership: Membership, role: Role, by=None) -> Membership:
    """Change a member's role. Locks the team's commander rows so two concurrent demotions
    cannot both succeed and leave the team without a commander."""
    commanders = list(
        Membership.objects.select_for_update()
        .filter(team_id=membership.team_id, role=Role.COMMANDER)
        .values_list("pk", flat=True)
    )
    if role != Role.COMMANDER and commanders == [membership.pk]:
        raise ValidationError("A team needs at least one commander.")
    before = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    audit.record(
        "member.role",
        actor=by,
        team=membership.team_id,
        obj=membership,
        summary=f"{membership.user.get_username()}: {before} -> {role}",
        data={"user": membership.user.get_username(), "from": str(before), "to": str(role)},
    )
    return membership
