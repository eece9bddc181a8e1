"""Changes to teams. Each runs in one transaction and keeps the team commandable:
a team never loses its last commander.

Nobody is added to a team without their consent: a commander invites (``invite``), the
invitee accepts or declines (``accept`` / ``decline``), and every step is audited. What
the inviter is told never depends on whether the invitee has an account (issue 19.12)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

import audit
from teams.models import Invitation, Membership, Role, Team


@transaction.atomic
def create_team(*, name: str, creator) -> Team:
    """Create a team; its creator is its first commander.

    Names clash only with teams the creator already belongs to, which they can see on
    their Teams page anyway; another tenant's team of the same name is no clash at all
    (teams are addressed by UUID), so the answer says nothing about other tenants."""
    if Team.objects.filter(memberships__user=creator, name__iexact=name).exists():
        raise ValidationError("You are already in a team with this name; pick another.")
    team = Team.objects.create(name=name, created_by=creator)
    Membership.objects.create(team=team, user=creator, role=Role.COMMANDER)
    audit.record("team.create", actor=creator, team=team, obj=team, summary=f"Created {name}")
    return team


def normalise_invitee(text: str) -> str:
    """Addresses compare in lower case; usernames exactly as Django compares them."""
    text = text.strip()
    return text.lower() if "@" in text else text


@transaction.atomic
def invite(*, team: Team, invitee: str, role: Role, by) -> Invitation:
    """Offer ``role`` in ``team`` to a username or e-mail address.

    Never looks the invitee up: the row, the audit entry and the answer are the same
    whether or not an account matches. Re-inviting someone with an open invitation renews
    it (new role, new expiry) rather than piling up rows."""
    invitee = normalise_invitee(invitee)
    expires_at = timezone.now() + timedelta(days=settings.ATLAS_INVITATION_DAYS)
    invitation = (
        Invitation.objects.select_for_update().pending().filter(team=team, invitee=invitee).first()
    )
    if invitation is None:
        invitation = Invitation.objects.create(
            team=team, invitee=invitee, role=role, invited_by=by, expires_at=expires_at
        )
    else:
        invitation.role, invitation.invited_by, invitation.expires_at = role, by, expires_at
        invitation.save(update_fields=["role", "invited_by", "expires_at"])
    audit.record(
        "invitation.create",
        actor=by,
        team=team,
        obj=invitation,
        summary=f"Invited {invitee} as {Role(role).label.lower()}",
        data={"invitee": invitee, "role": str(role), "expires_at": expires_at.isoformat()},
    )
    return invitation


def _open_for(invitation_id, user) -> Invitation:
    """The user's own open invitation, locked; anything else is ``Invitation.DoesNotExist``
    (the views answer 404: someone else's invitation is not disclosed)."""
    return (
        Invitation.objects.select_for_update()
        .select_related("team")
        .addressed_to(user)
        .pending()
        .get(pk=invitation_id)
    )


@transaction.atomic
def accept(*, invitation_id, user) -> Membership:
    """Join the team with the invited role. Someone already a member keeps their role (an
    invitation is an offer to join, not a way to change a role behind the team's back)."""
    invitation = _open_for(invitation_id, user)
    invitation.status, invitation.answered_at = Invitation.Status.ACCEPTED, timezone.now()
    invitation.save(update_fields=["status", "answered_at"])
    team = invitation.team
    username = user.get_username()
    membership, created = Membership.objects.get_or_create(
        team=team, user=user, defaults={"role": invitation.role}
    )
    audit.record(
        "invitation.accept",
        actor=user,
        team=team,
        obj=invitation,
        summary=f"{username} accepted the invitation as {Role(invitation.role).label.lower()}",
        data={"invitee": invitation.invitee, "role": invitation.role, "joined": created},
    )
    if created:
        audit.record(
            "member.add",
            actor=user,
            team=team,
            obj=membership,
            summary=f"{username} joined as {Role(membership.role).label.lower()} by invitation",
            data={"user": username, "role": membership.role, "invitation": str(invitation.pk)},
        )
    return membership


@transaction.atomic
def decline(*, invitation_id, user) -> Invitation:
    """Refuse the offer. The team's log shows it: answering is the invitee's own act."""
    invitation = _open_for(invitation_id, user)
    invitation.status, invitation.answered_at = Invitation.Status.DECLINED, timezone.now()
    invitation.save(update_fields=["status", "answered_at"])
    audit.record(
        "invitation.decline",
        actor=user,
        team=invitation.team,
        obj=invitation,
        summary=f"{user.get_username()} declined the invitation",
        data={"invitee": invitation.invitee, "role": invitation.role},
    )
    return invitation


@transaction.atomic
def revoke(*, team: Team, invitation_id, by) -> Invitation:
    """Withdraw an open invitation of this team (``Invitation.DoesNotExist`` otherwise)."""
    invitation = Invitation.objects.select_for_update().pending().get(team=team, pk=invitation_id)
    invitation.status, invitation.answered_at = Invitation.Status.REVOKED, timezone.now()
    invitation.save(update_fields=["status", "answered_at"])
    audit.record(
        "invitation.revoke",
        actor=by,
        team=team,
        obj=invitation,
        summary=f"Revoked the invitation of {invitation.invitee}",
        data={"invitee": invitation.invitee, "role": invitation.role},
    )
    return invitation


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
