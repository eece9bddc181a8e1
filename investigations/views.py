"""Deployment pages. Thin: authorise through ``access``, read, render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from investigations.access import get_deployment


@require_GET
def deployment_detail(request: HttpRequest, deployment_id) -> HttpResponse:
    deployment = get_deployment(request.user, deployment_id)
    return render(request, "investigations/deployment.html", _context(deployment))


@require_GET
def deployment_targets(request: HttpRequest, deployment_id) -> HttpResponse:
    """The probe health table alone, for htmx to refresh in place."""
    deployment = get_deployment(request.user, deployment_id)
    return render(request, "investigations/_targets.html", _context(deployment))


def _context(deployment) -> dict:
    return {"deployment": deployment, "targets": deployment.targets.order_by("kind", "replica")}
