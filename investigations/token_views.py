"""Commanders create and revoke their team's API tokens."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from investigations.models import ApiToken
from investigations.tokens import create_token, revoke_token
from teams.access import authorize
from teams.models import Role


@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest, team_id) -> HttpResponse:
    membership = authorize(request.user, team_id, Role.COMMANDER)
    created = None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()[:100]
        if not name:
            messages.error(request, "Name the token after what will use it.")
        else:
            row, created = create_token(team=membership.team, name=name, user=request.user)
            messages.success(request, f"Token {row.name} created; copy it now.")
    rows = ApiToken.objects.filter(team=membership.team)
    return render(
        request,
        "investigations/tokens.html",
        {"team": membership.team, "rows": rows, "created": created},
    )


@require_POST
def revoke(request: HttpRequest, team_id, token_id) -> HttpResponse:
    membership = authorize(request.user, team_id, Role.COMMANDER)
    if revoke_token(team=membership.team, token_id=token_id, user=request.user) is None:
        raise Http404
    messages.success(request, "Token revoked.")
    return redirect("api:tokens", team_id=membership.team_id)
