"""Team pages: thin views that authorise through ``teams.access`` and call one action."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from audit import log
from audit.models import Action
from teams import access, actions
from teams.forms import AddMemberForm, ChangeRoleForm, TeamForm
from teams.models import Membership, Role


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
        except IntegrityError:
            form.add_error("name", "A team with this name exists.")
        else:
            messages.success(request, f"Team {team} created; you are its commander.")
            return redirect("teams:detail", team_id=team.id)
    teams = access.teams_of(request.user)
    return render(request, "teams/list.html", {"teams": teams, "form": form}, status=400)


@require_GET
def team_detail(request: HttpRequest, team_id) -> HttpResponse:
    membership = access.authorize(request.user, team_id)
    return _render_detail(request, membership, AddMemberForm())


@require_POST
def add_member(request: HttpRequest, team_id) -> HttpResponse:
    membership = access.authorize(request.user, team_id, Role.COMMANDER)
    form = AddMemberForm(request.POST)
    if form.is_valid():
        try:
            added = actions.add_member(
                team=membership.team,
                username=form.cleaned_data["username"],
                role=Role(form.cleaned_data["role"]),
                by=request.user,
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, f"Added {added.user} as {added.get_role_display()}.")
            return redirect("teams:detail", team_id=membership.team_id)
    return _render_detail(request, membership, form, status=400)


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
    return render(
        request,
        "teams/detail.html",
        {
            "team": membership.team,
            "me": membership,
            "members": members,
            "form": form,
            "roles": Role.choices,
            "can_manage": membership.allows(Role.COMMANDER),
        },
        status=status,
    )
