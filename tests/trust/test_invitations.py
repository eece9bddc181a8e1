"""Invitations instead of silent adds, and no existence oracle (issue 19.12).

The attack as reproduced: a commander of any team posted usernames to the add-member form
and read "No active user named ..." or a new member row, so the form both enumerated
accounts and put people in teams without their consent; and creating a team named like
another tenant's answered "A team with this name exists". Here each is tried for real
through the pages, comparing what the attacker sees for a name that exists with one that
does not, byte for byte once the name itself is taken out.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEntry
from teams import actions
from teams.models import Invitation, Membership, Role, Team

pytestmark = pytest.mark.django_db


def _invite(client, team, invitee: str, role: str = Role.VIEWER):
    return client.post(
        reverse("teams:invite", args=[team.pk]), {"invitee": invitee, "role": role}, follow=True
    )


def _told(response, invitee: str) -> list[str]:
    """What the inviter is told, with the typed name taken out."""
    return [str(m).replace(invitee, "NAME") for m in response.context["messages"]]


def _pending_row(response, invitee: str) -> str:
    """The invitee's row of the pending list, with its name, id and times taken out."""
    body = response.content.decode().split('data-testid="pending-invitations"')[1]
    row = next(r for r in body.split("<tr>") if f"<td>{invitee}</td>" in r).split("</tr>")[0]
    row = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "UUID", row.replace(invitee, "NAME"))
    return re.sub(r'title="[^"]*"|in [^<]*</td>|value="[^"]*"', "", row)


def test_inviting_answers_the_same_whether_or_not_the_account_exists(
    client_for, commander, team, outsider
):
    client = client_for(commander)
    real = _invite(client, team, outsider.username)
    ghost = _invite(client, team, "no-such-person")
    assert real.status_code == ghost.status_code == 200
    assert real.redirect_chain == ghost.redirect_chain
    assert _told(real, outsider.username) == _told(ghost, "no-such-person")
    assert _pending_row(ghost, outsider.username) == _pending_row(ghost, "no-such-person")
    # The rows and the audit entries treat both the same way.
    assert set(Invitation.objects.values_list("invitee", "status")) == {
        (outsider.username, "pending"),
        ("no-such-person", "pending"),
    }
    entries = AuditEntry.objects.filter(action="invitation.create").order_by("id")
    assert [sorted(e.data) for e in entries] == [["expires_at", "invitee", "role"]] * 2
    # And nobody was added.
    assert not Membership.objects.filter(team=team, user=outsider).exists()


def test_an_address_invitation_reaches_the_account_with_that_address(
    client_for, commander, team, outsider
):
    outsider.email = "Olga@Example.com"
    outsider.save(update_fields=["email"])
    _invite(client_for(commander), team, "OLGA@example.COM", Role.RESPONDER)
    page = client_for(outsider).get(reverse("teams:invitations"))
    assert team.name in page.content.decode()
    invitation = Invitation.objects.get()
    assert invitation.invitee == "olga@example.com"
    client_for(outsider).post(reverse("teams:accept_invitation", args=[invitation.pk]))
    assert Membership.objects.get(team=team, user=outsider).role == Role.RESPONDER


def test_the_invitee_sees_pending_invitations_after_login_and_accepts(
    client, commander, team, outsider
):
    from tests.conftest import PASSWORD

    _invite(_login(client, commander), team, outsider.username, Role.RESPONDER)
    client.logout()
    client.post(reverse("login"), {"username": outsider.username, "password": PASSWORD})
    home = client.get(reverse("home")).content.decode()
    assert "1 open team invitation" in home
    invitation = Invitation.objects.get()
    mine = client.get(reverse("teams:invitations")).content.decode()
    assert reverse("teams:accept_invitation", args=[invitation.pk]) in mine
    response = client.post(reverse("teams:accept_invitation", args=[invitation.pk]))
    assert response.status_code == 302
    assert Membership.objects.get(team=team, user=outsider).role == Role.RESPONDER
    invitation.refresh_from_db()
    assert invitation.status == Invitation.Status.ACCEPTED and invitation.answered_at
    # Accepted once: a replay is 404 and changes nothing.
    assert client.post(reverse("teams:accept_invitation", args=[invitation.pk])).status_code == 404
    assert list(
        AuditEntry.objects.filter(team=team).order_by("id").values_list("action", "actor_name")
    ) == [
        ("invitation.create", commander.username),
        ("invitation.accept", outsider.username),
        ("member.add", outsider.username),
    ]


def _login(client, user):
    client.force_login(user)
    return client


def test_declining_adds_no_one_and_is_audited(client_for, commander, team, outsider):
    _invite(client_for(commander), team, outsider.username)
    invitation = Invitation.objects.get()
    response = client_for(outsider).post(reverse("teams:decline_invitation", args=[invitation.pk]))
    assert response.status_code == 302
    assert not Membership.objects.filter(team=team, user=outsider).exists()
    invitation.refresh_from_db()
    assert invitation.status == Invitation.Status.DECLINED
    entry = AuditEntry.objects.get(action="invitation.decline")
    assert (entry.actor_name, entry.team_id) == (outsider.username, team.pk)
    # Answered: neither accept nor decline again.
    for name in ("teams:accept_invitation", "teams:decline_invitation"):
        assert client_for(outsider).post(reverse(name, args=[invitation.pk])).status_code == 404


def test_someone_elses_invitation_is_404_for_every_other_user(
    client_for, commander, viewer, team, outsider
):
    _invite(client_for(commander), team, outsider.username)
    invitation = Invitation.objects.get()
    for intruder in (commander, viewer):
        for name in ("teams:accept_invitation", "teams:decline_invitation"):
            response = client_for(intruder).post(reverse(name, args=[invitation.pk]))
            assert response.status_code == 404
        assert reverse("teams:accept_invitation", args=[invitation.pk]) not in (
            client_for(intruder).get(reverse("teams:invitations")).content.decode()
        )
    invitation.refresh_from_db()
    assert invitation.status == Invitation.Status.PENDING


def test_invitations_lapse(client_for, commander, team, outsider, time_machine, settings):
    settings.ATLAS_INVITATION_DAYS = 2
    time_machine.move_to(timezone.now(), tick=False)
    _invite(client_for(commander), team, outsider.username)
    invitation = Invitation.objects.get()
    time_machine.move_to(invitation.expires_at + timedelta(seconds=1))
    assert invitation.expires_at - invitation.created == timedelta(days=2)
    assert team.name not in client_for(outsider).get(reverse("teams:invitations")).content.decode()
    response = client_for(outsider).post(reverse("teams:accept_invitation", args=[invitation.pk]))
    assert response.status_code == 404
    assert not Membership.objects.filter(team=team, user=outsider).exists()
    assert (
        invitation.invitee
        not in client_for(commander)
        .get(reverse("teams:detail", args=[team.pk]))
        .content.decode()
        .split("pending-invitations")[-1]
    )


def test_a_revoked_invitation_cannot_be_accepted(client_for, commander, team, outsider):
    _invite(client_for(commander), team, outsider.username)
    invitation = Invitation.objects.get()
    revoke = reverse("teams:revoke_invitation", args=[team.pk, invitation.pk])
    assert client_for(commander).post(revoke).status_code == 302
    assert client_for(commander).post(revoke).status_code == 404  # already revoked
    response = client_for(outsider).post(reverse("teams:accept_invitation", args=[invitation.pk]))
    assert response.status_code == 404
    assert AuditEntry.objects.filter(action="invitation.revoke").count() == 1


def test_accepting_never_changes_an_existing_members_role(client_for, commander, viewer, team):
    _invite(client_for(commander), team, viewer.username, Role.COMMANDER)
    invitation = Invitation.objects.get()
    client_for(viewer).post(reverse("teams:accept_invitation", args=[invitation.pk]))
    assert Membership.objects.get(team=team, user=viewer).role == Role.VIEWER
    assert not AuditEntry.objects.filter(action="member.add").exists()


def test_re_inviting_renews_the_open_invitation(client_for, commander, team):
    client = client_for(commander)
    _invite(client, team, "someone", Role.VIEWER)
    _invite(client, team, "someone", Role.RESPONDER)
    assert list(Invitation.objects.values_list("invitee", "role")) == [("someone", "responder")]


@pytest.mark.parametrize("bad", ["two words", "x" * 151, "a@b@c.example", "<script>"])
def test_malformed_invitees_are_refused_for_their_shape_alone(client_for, commander, team, bad):
    response = client_for(commander).post(
        reverse("teams:invite", args=[team.pk]), {"invitee": bad, "role": Role.VIEWER}
    )
    assert response.status_code == 400
    assert "Enter a username or an e-mail address." in response.content.decode()
    assert not Invitation.objects.exists()


def test_creating_a_team_named_like_another_tenants_reveals_nothing(client_for, outsider, team):
    """The outsider names the team of another tenant: created like any other name (names
    are unique per creator, teams are addressed by UUID), so the answer discloses nothing."""
    response = client_for(outsider).post(reverse("teams:create"), {"name": team.name})
    assert response.status_code == 302
    mine = Team.objects.get(name=team.name, created_by=outsider)
    assert mine.pk != team.pk
    assert Membership.objects.get(team=mine, user=outsider).role == Role.COMMANDER
    assert not Membership.objects.filter(team=team, user=outsider).exists()


def test_a_name_clash_only_with_ones_own_teams(client_for, outsider, other_team):
    """The clash the creator can be told about is with a team they already see."""
    response = client_for(outsider).post(reverse("teams:create"), {"name": other_team.name.upper()})
    assert response.status_code == 400
    assert "already in a team with this name" in response.content.decode()
    assert Team.objects.filter(name__iexact=other_team.name).count() == 1


def test_invitation_expiry_is_read_from_the_clock(team, commander):
    """``pending()`` compares with now; no job has to mark rows expired."""
    with transaction.atomic():
        invitation = actions.invite(team=team, invitee="x", role=Role.VIEWER, by=commander)
    assert Invitation.objects.pending().filter(pk=invitation.pk).exists()
    Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now())
    assert not Invitation.objects.pending().filter(pk=invitation.pk).exists()
