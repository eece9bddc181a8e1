"""Deployment and investigation pages. Thin: authorise through ``access``, call one
action or one pure evaluation, render."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from audit.log import for_investigation as audit_log_of
from deployments.access import deployment_access, get_deployment
from deployments.budget import (
    Budget,
    chunk_cost_ms,
    kv_capacity_tokens,
    max_chunk_for_itl,
    mixed_step_ceiling_ms,
)
from investigations import actions, controllers, fixplans, live, panels
from investigations.access import get_investigation, investigation_access
from investigations.choices import (
    IncidentRole,
    IncidentStatus,
    NodeState,
    Severity,
    Suggestion,
)
from investigations.evidence import frozen_evidence
from investigations.forms import DecisionForm, OpenInvestigationForm
from investigations.gate import alert_rule, rules_yaml
from investigations.playbook import get_playbook
from probes import actions as probe_actions
from probes import kinds
from probes.forms import TargetForm
from probes.models import Target, TargetKind
from teams.models import Role


@require_GET
def deployment_detail(request: HttpRequest, deployment_id) -> HttpResponse:
    granted = deployment_access(request.user, deployment_id)
    return render(request, "investigations/deployment.html", deployment_context(granted))


@require_GET
def deployment_targets(request: HttpRequest, deployment_id) -> HttpResponse:
    """The probe health table alone, for htmx to refresh in place."""
    granted = deployment_access(request.user, deployment_id)
    return render(request, "investigations/_targets.html", deployment_context(granted))


@require_GET
def simulator_clock(request: HttpRequest, deployment_id) -> HttpResponse:
    """The demo simulator's incident clock (htmx, every 5 s). Only for a controller that
    shows it: a drill range's timing is part of the drill's ground truth."""
    granted = deployment_access(request.user, deployment_id)
    row = controllers.controller_of(granted.obj)
    if row is None or not row.shows_clock:
        raise Http404("this deployment shows no simulator clock")
    try:
        report = controllers.clock(row)
        view, error = controllers.describe_clock(report or {}), ""
    except controllers.ControllerError as exc:
        view, error = None, str(exc)
    return render(
        request,
        "investigations/_sim_clock.html",
        {"deployment": granted.obj, "clock": view, "clock_error": error},
    )


@require_POST
def add_target(request: HttpRequest, deployment_id) -> HttpResponse:
    """Register a probe target (commanders: targets decide where workers connect). A refused
    target re-renders the whole deployment page with the form's errors."""
    granted = deployment_access(request.user, deployment_id, Role.COMMANDER)
    deployment = granted.obj
    form = TargetForm(request.POST, instance=Target(deployment=deployment))
    if form.is_valid():
        target = probe_actions.add_target(form=form, user=request.user)
        messages.success(request, f"Probing {target}.")
        return redirect("investigations:deployment", deployment_id=deployment.pk)
    context = deployment_context(granted, target_form=form)
    return render(request, "investigations/deployment.html", context, status=400)


@require_POST
def toggle_target(request: HttpRequest, deployment_id, target_id) -> HttpResponse:
    deployment = deployment_access(request.user, deployment_id, Role.COMMANDER).obj
    try:
        target = deployment.targets.probed().get(pk=target_id)
    except (Target.DoesNotExist, ValueError):
        raise Http404 from None
    probe_actions.set_enabled(target=target, enabled=not target.enabled, user=request.user)
    state = "enabled" if target.enabled else "disabled"
    messages.success(request, f"{target} {state}.")
    return redirect("investigations:deployment", deployment_id=deployment.pk)


def deployment_context(granted, *, target_form: TargetForm | None = None) -> dict:
    """Everything the deployment page (and its targets partial) shows, with the write forms
    only for the roles that may use them."""
    deployment = granted.obj
    can_manage = granted.allows(Role.COMMANDER)
    budget = Budget.of(deployment)
    return {
        "deployment": deployment,
        "derived": {
            "kv_capacity_tokens": kv_capacity_tokens(budget),
            "chunk_cost_ms": chunk_cost_ms(budget),
            "step_ceiling_ms": mixed_step_ceiling_ms(budget),
            "max_chunk_for_itl": max_chunk_for_itl(budget),
        },
        "targets": deployment.targets.probed().order_by("kind", "replica"),
        "can_manage": can_manage,
        "can_open": granted.allows(Role.RESPONDER),
        "target_form": (target_form or TargetForm()) if can_manage else None,
        "open_form": OpenInvestigationForm(),
        "investigations": deployment.investigations.order_by("-opened_at")[:20],
        **_controller_context(deployment),
    }


def _controller_context(deployment) -> dict:
    """Whether Atlas applies fixes to this deployment itself (an engine controller), and
    whether the page shows the demo simulator's incident clock."""
    row = controllers.controller_of(deployment)
    return {
        "controller": row,
        "sim_clock": row is not None and row.shows_clock,
        "deployment_id": deployment.pk,
    }


@require_POST
def open_from_home(request: HttpRequest) -> HttpResponse:
    """The home page's one-step open: the deployment comes with the form."""
    try:
        deployment_id = uuid.UUID(request.POST.get("deployment", ""))
    except ValueError:
        raise Http404 from None
    return open_investigation(request, deployment_id)


@require_POST
def open_investigation(request: HttpRequest, deployment_id) -> HttpResponse:
    deployment = get_deployment(request.user, deployment_id, Role.RESPONDER)
    form = OpenInvestigationForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Pick a symptom from the list.")
        return redirect("investigations:deployment", deployment_id=deployment.pk)
    investigation = actions.open_investigation(
        deployment=deployment,
        symptom=form.cleaned_data["symptom"],
        user=request.user,
        title=form.cleaned_data["title"],
    )
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_GET
def investigation_detail(request: HttpRequest, investigation_id) -> HttpResponse:
    granted = investigation_access(request.user, investigation_id)
    context = _page_context(granted)
    # From the probe strip's targets, already read: no query of its own.
    context["has_profiler_targets"] = any(
        t.kind == TargetKind.PROFILER and t.enabled for t in context["targets"]
    )
    if any(t.kind in kinds.values(source="log") for t in context["targets"]):
        context["unrecognised_log_lines"] = panels.unrecognised_log_lines(
            granted.obj, timezone.now()
        )
    context.update(_command_context(granted))
    return render(request, "investigations/detail.html", context)


def _command_context(granted) -> dict:
    """The status and roles panels: who holds which incident role, and the forms for those
    who may change them (team commanders and the incident commander)."""
    investigation = granted.obj
    holders = list(investigation.roles.filter(ended_at__isnull=True).select_related("user"))
    commander = next((a for a in holders if a.role == IncidentRole.COMMANDER), None)
    can_lead = (
        actions.command_refusal(granted.membership, commander.user_id if commander else None)
        is None
        and investigation.status == investigation.Status.OPEN
    )
    return {
        "incident_commander": commander,
        "role_holders": holders,
        "can_lead": can_lead,
        "statuses": list(IncidentStatus),
        "incident_roles": list(IncidentRole),
        "assignable": list(actions.assignable_members(investigation)) if can_lead else [],
    }


def _lead_access(user, investigation_id):
    """The investigation, for a team commander or its incident commander; 403 otherwise."""
    granted = investigation_access(user, investigation_id, Role.RESPONDER)
    refusal = actions.command_refusal(granted.membership, actions.commander_id(granted.obj))
    if refusal:
        raise PermissionDenied(refusal)
    return granted.obj


@require_POST
def set_status(request: HttpRequest, investigation_id) -> HttpResponse:
    """The incident commander or a team commander moves the status, with a reason."""
    investigation = _lead_access(request.user, investigation_id)
    try:
        actions.set_status(
            investigation=investigation,
            status=request.POST.get("status", "")[:16],
            reason=request.POST.get("reason", "")[:1000],
            user=request.user,
        )
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Status set to {investigation.get_incident_status_display()}.")
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_POST
def assign_role(request: HttpRequest, investigation_id) -> HttpResponse:
    """Assign an incident role (giving command to someone else is a handover) or release
    one (``op=release``)."""
    investigation = _lead_access(request.user, investigation_id)
    action = actions.release_role if request.POST.get("op") == "release" else actions.assign_role
    try:
        action(
            investigation=investigation,
            role=request.POST.get("role", "")[:16],
            username=request.POST.get("username", "")[:150],
            reason=request.POST.get("reason", "")[:1000],
            user=request.user,
        )
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Roles updated.")
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_GET
def investigation_tree(request: HttpRequest, investigation_id) -> HttpResponse:
    """The evaluated tree alone, for htmx to refresh every poll cycle."""
    context = _page_context(investigation_access(request.user, investigation_id))
    context["oob_timeline"] = True  # the timeline sits lower on the page; swapped by id
    return render(request, "investigations/_tree.html", context)


@require_GET
def investigation_evidence(request: HttpRequest, investigation_id) -> HttpResponse:
    """The evidence cards, refreshed less often than the tree and only when the record
    changed: the page sends the version it shows (``v``), and an unchanged record answers
    204, which htmx leaves alone (no redraw, no flicker). Cards are cached per version, so
    several people watching one incident cost one build per poll cycle."""
    investigation = get_investigation(request.user, investigation_id)
    version = panels.record_version(investigation)
    if request.GET.get("v") == version:
        return HttpResponse(status=204)
    key = f"atlas:evidence:{investigation.pk}:{version}"
    cards = cache.get(key)
    if cards is None:
        now = timezone.now()
        signals = panels.chart_signals(investigation, get_playbook(investigation.symptom), now)
        state = live.current_state(investigation, now=now, extra_signals=signals, gate=False)
        cards = panels.evidence_cards(
            investigation, state.playbook, state.result, state.observations, now
        )
        cache.set(key, cards, timeout=600)
    return render(
        request,
        "investigations/_evidence.html",
        {"investigation": investigation, "cards": cards, "version": version},
    )


@require_POST
def decide(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A decision needs a hypothesis, an action and a reason.")
        return redirect("investigations:detail", investigation_id=investigation.pk)
    data = form.cleaned_data
    try:
        node = live.current_state(investigation).result.find(data["node"])
    except KeyError:
        messages.error(request, "That hypothesis is not part of this investigation.")
        return redirect("investigations:detail", investigation_id=investigation.pk)
    try:
        actions.decide(
            investigation=investigation,
            node=data["node"],
            action=data["action"],
            reason=data["reason"],
            user=request.user,
            evidence=frozen_evidence(node),
            expected_state=data["expected_state"],
        )
    except (actions.DecisionConflict, ValueError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{data['action']} {data['node']} recorded.")
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_POST
def set_severity(request: HttpRequest, investigation_id) -> HttpResponse:
    """Responders and commanders grade the incident; a re-grade needs its reason."""
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    try:
        actions.set_severity(
            investigation=investigation,
            severity=request.POST.get("severity", "")[:8],
            reason=request.POST.get("reason", "")[:1000],
            user=request.user,
        )
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Severity set to {investigation.get_severity_display()}.")
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_POST
def record_fix(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    node_key = request.POST.get("node", "")[:64]
    try:
        node = live.current_state(investigation).result.find(node_key)
        if node.fix is None:
            raise KeyError(node_key)
        changed = fixplans.changed_since_shown(node.fix.parameters, request.POST)
        if changed:
            raise ValueError(
                f"The suggested fix changed since this page was loaded ({changed}); "
                "review it and record again."
            )
        _, applied = controllers.apply_and_record(
            investigation=investigation,
            node=node_key,
            plan=node.fix,
            user=request.user,
            note=request.POST.get("note", "")[:4000],
        )
    except KeyError:
        messages.error(request, "That hypothesis has no fix to record.")
    except ValueError as exc:
        messages.error(request, str(exc))
    except controllers.ControllerError as exc:
        messages.error(request, f"The fix was not applied, and nothing was recorded: {exc}")
    else:
        if applied is not None:
            messages.success(
                request, f"Fix applied {applied.summary} and recorded; verification has started."
            )
        else:
            messages.success(request, "Fix recorded; verification has started.")
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_POST
def close(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.COMMANDER)
    try:
        actions.close_investigation(
            investigation=investigation,
            user=request.user,
            override=request.POST.get("override", "")[:4000],
        )
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Investigation closed.")
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_GET
def audit_log(request: HttpRequest, investigation_id) -> HttpResponse:
    """The investigation's audit entries alone (the partial the investigation page includes)."""
    investigation = get_investigation(request.user, investigation_id)
    return render(
        request,
        "audit/_investigation_log.html",
        {"investigation": investigation, "audit_entries": audit_log_of(investigation)},
    )


@require_GET
def gate_rules(request: HttpRequest, investigation_id) -> HttpResponse:
    """The regression gate as a Prometheus rules file, for review and deployment."""
    investigation = get_investigation(request.user, investigation_id)
    fix = investigation.fixes.order_by("-applied_at").first()
    node = get_playbook(investigation.symptom).node(fix.node) if fix else None
    if node is None or node.fix is None or node.fix.alert is None:
        raise Http404("no regression gate for this investigation")
    rule = alert_rule(
        node,
        fix.parameters,
        investigation_url=request.build_absolute_uri(
            reverse("investigations:detail", args=[investigation.pk])
        ),
        investigation_id=str(investigation.pk),
    )
    response = HttpResponse(rules_yaml([rule]), content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="atlas-gate-{investigation.pk}.yml"'
    return response


def _fix_recorded(investigation, top, latest) -> bool:
    """Whether the leading cause's fix is already recorded; a query only when another
    cause's fix is the latest (a pair of incidents)."""
    if top is None or top.fix is None or latest is None:
        return False
    if latest.node == top.key:
        return True
    return investigation.fixes.filter(node=top.key).exists()


def _page_context(granted) -> dict:
    """The investigation page's (and tree partial's) context; write forms only for the roles
    that may use them (responders decide and record fixes, commanders close)."""
    investigation = granted.obj
    now = timezone.now()
    # The tree refreshes every 5 s for everyone watching: the observation read is shared
    # between requests until something new is stored (live.current_state, ``reuse``).
    state = live.current_state(
        investigation, now=now, extra_signals=panels.BUDGET_SIGNALS, reuse=True
    )
    result = state.result
    budget = Budget.of(investigation.deployment)
    ranking = [result.find(key) for key in result.ranking]
    top = ranking[0] if ranking else None
    return {
        **_controller_context(investigation.deployment),
        "investigation": investigation,
        # A cause's fix is recorded once; its button goes once it is.
        "top_fix_recorded": _fix_recorded(investigation, top, state.fix),
        "can_respond": granted.allows(Role.RESPONDER),
        "can_command": granted.allows(Role.COMMANDER),
        "severities": list(Severity),
        "playbook": state.playbook,
        "result": result,
        "fix_record": state.fix,
        "verification": state.verification,
        "gate": state.gate,
        "ranking": ranking,
        "top": top,
        # The path to the most likely cause is expanded whatever its nodes suggest.
        "leading": set(result.leading_path()),
        # A confirmed cause keeps its fix whatever the evidence suggests since: decisions
        # stand until someone reopens them.
        "show_fix": top is not None
        and top.fix is not None
        and (top.state == NodeState.CONFIRMED or top.suggestion == Suggestion.CONFIRM),
        "budget_rows": panels.budget_rows(
            budget, state.observations, now.timestamp(), result.expected
        ),
        "targets": list(investigation.deployment.targets.probed().order_by("kind", "replica")),
        "timeline": investigation.timeline.select_related("actor").order_by("-at", "-pk")[:50],
    }
