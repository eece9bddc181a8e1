"""Deployment pages. Thin: authorise through ``access``, read, render."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from investigations.access import get_deployment
from investigations.budget import (
    Budget,
    chunk_cost_ms,
    kv_capacity_tokens,
    max_chunk_for_itl,
    mixed_step_ceiling_ms,
)
from probes.forms import TargetForm
from teams.models import Membership, Role


@require_GET
def deployment_detail(request: HttpRequest, deployment_id) -> HttpResponse:
    deployment = get_deployment(request.user, deployment_id)
    return render(request, "investigations/deployment.html", _context(deployment))


@require_GET
def deployment_targets(request: HttpRequest, deployment_id) -> HttpResponse:
    """The probe health table alone, for htmx to refresh in place."""
    deployment = get_deployment(request.user, deployment_id)
    return render(request, "investigations/_targets.html", _context(deployment, request.user))


def _context(deployment, user=None) -> dict:
    can_manage = (
        user is not None
        and Membership.objects.filter(
            team_id=deployment.team_id, user=user, role=Role.COMMANDER
        ).exists()
    )
    budget = Budget.of(deployment)
    return {
        "deployment": deployment,
        "derived": {
            "kv_capacity_tokens": kv_capacity_tokens(budget),
            "chunk_cost_ms": chunk_cost_ms(budget),
            "step_ceiling_ms": mixed_step_ceiling_ms(budget),
            "max_chunk_for_itl": max_chunk_for_itl(budget),
        },
        "targets": deployment.targets.order_by("kind", "replica"),
        "can_manage": can_manage,
        "target_form": TargetForm() if can_manage else None,
    }
