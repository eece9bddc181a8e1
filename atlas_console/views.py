"""Project-level pages: the home page and the unauthenticated health endpoint."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from deployments import access as deployment_access
from investigations import access as investigation_access
from investigations import overview
from investigations.forms import OpenInvestigationForm
from investigations.models import Investigation
from probes.health import worker_status
from probes.models import Target
from teams.access import memberships_of
from teams.models import Invitation, Role


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    mine = investigation_access.visible_to(request.user).select_related("deployment")
    memberships = list(memberships_of(request.user))
    # The probe targets people registered (not the console's store of artifact signals).
    probed = Prefetch("targets", queryset=Target.objects.probed())
    deployments = list(deployment_access.visible_to(request.user).prefetch_related(probed))
    # The one-step open form offers only deployments where the user may open (responder+).
    responds = {m.team_id for m in memberships if m.allows(Role.RESPONDER)}
    return render(
        request,
        "home.html",
        {
            "teams": [m.team for m in memberships],
            "can_create_deployment": any(m.allows(Role.COMMANDER) for m in memberships),
            "deployments": deployments,
            "openable": [d for d in deployments if d.team_id in responds],
            "active": overview.rows(mine.filter(status=Investigation.Status.OPEN)[:50]),
            "recent": overview.rows(
                mine.filter(status=Investigation.Status.CLOSED).order_by("-closed_at")[:20]
            ),
            "open_form": OpenInvestigationForm(),
            "workers": worker_status(),
            # Seen right after login (issue 19.12): people join teams by accepting.
            "invitations": Invitation.objects.addressed_to(request.user).pending().count(),
        },
    )


@require_GET
@never_cache
@login_not_required
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose health checks: the database answers.

    Says nothing about teams or investigations, so it is safe without login.
    """
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "error", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok"})


@require_GET
def workers_partial(request: HttpRequest) -> HttpResponse:
    """The probe-health strip, refreshed by htmx without reloading the page.

    Stale heartbeats alone cannot say whether the workers or the broker went away; only
    then is the broker asked (one PING, one second at most), so the strip can name it."""
    status = worker_status()
    if not status.alive and _broker_reachable() is False:
        from dataclasses import replace

        status = replace(status, reason="broker unreachable")
    return render(request, "_workers.html", {"workers": status})


def _broker_reachable() -> bool | None:
    """None for the embedded broker (a folder on this machine, never unreachable)."""
    from django.conf import settings

    if settings.ATLAS_EMBEDDED_BROKER:
        return None
    import redis

    try:
        with redis.Redis.from_url(
            settings.CELERY_BROKER_URL, socket_connect_timeout=1, socket_timeout=1
        ) as client:
            client.ping()
    except (redis.RedisError, OSError):
        return False
    return True
