"""Registering probe targets: commanders only (targets decide where workers connect)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from deployments.access import get_deployment
from probes import actions
from probes.forms import TargetForm
from probes.models import Target
from teams.models import Role


@require_POST
def add_target(request: HttpRequest, deployment_id) -> HttpResponse:
    deployment = get_deployment(request.user, deployment_id, Role.COMMANDER)
    form = TargetForm(request.POST, instance=Target(deployment=deployment))
    if form.is_valid():
        target = actions.add_target(form=form, user=request.user)
        messages.success(request, f"Probing {target}.")
        return redirect("investigations:deployment", deployment_id=deployment.pk)
    return render(
        request,
        "investigations/deployment.html",
        {
            "deployment": deployment,
            "targets": deployment.targets.order_by("kind", "replica"),
            "target_form": form,
            "can_manage": True,
        },
        status=400,
    )


@require_POST
def toggle_target(request: HttpRequest, deployment_id, target_id) -> HttpResponse:
    deployment = get_deployment(request.user, deployment_id, Role.COMMANDER)
    try:
        target = deployment.targets.get(pk=target_id)
    except (Target.DoesNotExist, ValueError):
        raise Http404 from None
    actions.set_enabled(target=target, enabled=not target.enabled, user=request.user)
    state = "enabled" if target.enabled else "disabled"
    messages.success(request, f"{target} {state}.")
    return redirect("investigations:deployment", deployment_id=deployment.pk)
