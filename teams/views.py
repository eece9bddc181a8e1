"""Team pages: thin views that authorise through ``teams.access`` and call one action."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from audit import log
from audit.models import Action
from teams import access, actions
from teams.forms import ChangeRoleForm, InviteForm, TeamForm
from teams.models import Invitation, Membership, Role

# What a commander is told after inviting, whoever they named: the same words whether or
# not an account matches (issue 19.12), so the answer is no existence oracle.
INVITED = (
    "Invitation recorded for {invitee}. If they have an account here, they will see it "
    "after they sign in; it lapses in {days} days."
)


@require_GET
def team_list(request: HttpRequest) -> HttpResponse:
    teams = access.teams_of(request.user).prefetch_related("memberships")
    return render(request, "teams/list.html", {"teams": teams, "form": TeamForm()})


@require_POST
def create_team(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST)
    if form.is_valid():
        try:
            team = actions.create_team(name=form.cleaned_data["name"], creator=request.user)
        except ValidationError as exc:
            form.add_error("name", exc)
        except IntegrityError:  # a concurrent create by the same person, same name
            form.add_error("name", "You already created a team with this name; pick another.")
        else:
            messages.success(request, f"Team {team} created; you are its commander.")
            return redirect("teams:detail", team_id=team.id)
    teams = access.teams_of(request.user)
    return render(request, "teams/list.html", {"teams": teams, "form": form}, status=400)


@require_GET
def team_detail(request: HttpRequest, team_id) -> HttpResponse:
    membership = access.authorize(request.user, team_id)
    return _render_detail(request, membership, InviteForm())


@require_POST
def invite(request: HttpRequest, team_id) -> HttpResponse:
    """Invite by username or address (commanders). No one is added here: the invitee
    accepts or declines on their own Invitations page."""
    membership = access.authorize(request.user, team_id, Role.COMMANDER)
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _render_detail(request, membership, form, status=400)
    invitation = actions.invite(
        team=membership.team,
        invitee=form.cleaned_data["invitee"],
        role=Role(form.cleaned_data["role"]),
        by=request.user,
    )
    messages.success(
        request,
        INVITED.format(invitee=invitation.invitee, days=settings.ATLAS_INVITATION_DAYS),
    )
    return redirect("teams:detail", team_id=membership.team_id)


@require_POST
def revoke_invitation(request: HttpRequest, team_id, invitation_id) -> HttpResponse:
    membership = access.authorize(request.user, team_id, Role.COMMANDER)
    try:
        invitation = actions.revoke(
            team=membership.team, invitation_id=invitation_id, by=request.user
        )
    except Invitation.DoesNotExist:
        raise Http404 from None
    messages.success(request, f"Revoked the invitation of {invitation.invitee}.")
    return redirect("teams:detail", team_id=membership.team_id)


@require_GET
def my_invitations(request: HttpRequest) -> HttpResponse:
    """The signed-in person's open invitations, to accept or decline."""
    invitations = (
        Invitation.objects.addressed_to(request.user)
        .pending()
        .select_related("team", "invited_by")
        .order_by("expires_at")
    )
    return render(request, "teams/invitations.html", {"invitations": invitations})


@require_POST
def accept_invitation(request: HttpRequest, invitation_id) -> HttpResponse:
    """Join with the invited role. Anyone but the invitee, and an answered, revoked or
    lapsed invitation, gets 404: no one learns of invitations that are not theirs."""
    try:
        joined = actions.accept(invitation_id=invitation_id, user=request.user)
    except Invitation.DoesNotExist:
        raise Http404 from None
    messages.success(request, f"You are in {joined.team} as {joined.get_role_display()}.")
    return redirect("teams:detail", team_id=joined.team_id)


@require_POST
def decline_invitation(request: HttpRequest, invitation_id) -> HttpResponse:
    try:
        declined = actions.decline(invitation_id=invitation_id, user=request.user)
    except Invitation.DoesNotExist:
        raise Http404 from None
    messages.success(request, f"Declined the invitation to {declined.team}.")
    return redirect("teams:invitations")


@require_POST
def change_role(request: HttpRequest, team_id, member_id) -> HttpResponse:
    membership = access.authorize(request.user, team_id, Role.COMMANDER)
    try:
        target = Membership.objects.get(team_id=membership.team_id, pk=member_id)
    except Membership.DoesNotExist:
        raise Http404 from None
    form = ChangeRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Pick a valid role.")
        return redirect("teams:detail", team_id=membership.team_id)
    try:
        actions.change_role(
            membership=target, role=Role(form.cleaned_data["role"]), by=request.user
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{target.user} is now {target.get_role_display()}.")
    return redirect("teams:detail", team_id=membership.team_id)


@require_GET
def audit_log(request: HttpRequest, team_id) -> HttpResponse:
    """The team's audit log (commanders), filtered by action."""
    membership = access.authorize(request.user, team_id, Role.COMMANDER)
    action = request.GET.get("action", "")
    if action not in Action.values:
        action = ""
    return render(
        request,
        "audit/team.html",
        {
            "team": membership.team,
            "entries": log.for_team(membership.team, action=action),
            "actions": Action.choices,
            "action": action,
        },
    )


def _render_detail(request, membership, form, status: int = 200) -> HttpResponse:
    members = membership.team.memberships.select_related("user")
    can_manage = membership.allows(Role.COMMANDER)
    invitations = (
        membership.team.invitations.pending().select_related("invited_by") if can_manage else []
    )
    return render(
        request,
        "teams/detail.html",
        {
            "team": membership.team,
            "me": membership,
            "members": members,
            "form": form,
            "roles": Role.choices,
            "can_manage": can_manage,
            "invitations": invitations,
        },
        status=status,
    )
