"""Discovery pages: a deployment from its running engines, targets from a Prometheus.

Commanders only (the budget decides what evaluation calls normal; targets decide where
workers connect). Thin: authorise, read through ``probes.engine_discovery`` or
``probes.discovery`` (the network guard), call one action in ``probes.onboard``, render.
Nothing is saved until the commander confirms; reading is a POST, so no link on another
site can make Atlas fetch anything.
"""

from __future__ import annotations

import re

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from deployments.access import deployment_access
from deployments.forms import BUDGET_FIELDS, IDENTITY_FIELDS, NewDeploymentForm
from deployments.models import Deployment
from deployments.proposals import propose
from probes import discovery, engine_discovery, onboard
from probes.discovery_forms import EngineUrlsForm, PrometheusForm
from probes.models import TargetKind
from probes.net import ProbeError
from probes.parsing.engine import FLAVOURS
from probes.policy import fetch_policy
from teams.access import teams_of
from teams.models import Role

# What reading an engine can register: its /metrics, and its flavour's info endpoint.
ENGINE_TARGET_KINDS = frozenset(
    {TargetKind.ENGINE.value}
    | {f.info_endpoint.target_kind for f in FLAVOURS if f.info_endpoint is not None}
)
_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _suggested_name(served: object) -> str:
    """``meta-llama/Llama-3.1-8B`` -> ``Llama-3.1-8B``: a name to start from."""
    if not isinstance(served, str):
        return ""
    return _NAME.sub("-", served.rstrip("/").rsplit("/", 1)[-1]).strip("-")[:100]


def _chosen(values: list[str]) -> list[onboard.Wanted]:
    out = []
    for value in values[: engine_discovery.MAX_ENGINES * 2]:
        kind, _, rest = value.partition("|")
        replica, _, url = rest.partition("|")
        if kind in ENGINE_TARGET_KINDS and url:
            out.append(onboard.Wanted(kind, url, replica[:100]))
    return out


@require_http_methods(["GET", "POST"])
def from_engine(request: HttpRequest) -> HttpResponse:
    """Step 1: engine URLs. Step 2 (``step=read``): what they report, filled into the new
    deployment form with each value's source. Step 3 (``step=create``): save both."""
    teams = teams_of(request.user, Role.COMMANDER)
    if not teams.exists():
        raise PermissionDenied("Creating a deployment needs the commander role in a team.")
    if request.method == "GET":
        return render(request, "discovery/from_engine.html", {"urls_form": EngineUrlsForm()})
    urls_form = EngineUrlsForm(request.POST)
    if not urls_form.is_valid():
        return render(request, "discovery/from_engine.html", {"urls_form": urls_form}, status=400)
    urls = urls_form.cleaned_data["urls"]
    form, refused, status = None, None, 200
    if request.POST.get("step") == "create":
        form = NewDeploymentForm(request.POST, teams=teams)
        wanted = _chosen(request.POST.getlist("target"))
        if form.is_valid():
            try:
                deployment, targets = onboard.create_with_targets(
                    form=form, targets=wanted, user=request.user
                )
            except onboard.TargetRefused as exc:
                refused = exc
            else:
                messages.success(
                    request,
                    f"Deployment {deployment.name} created with {len(targets)} probe "
                    f"target{'s' if len(targets) != 1 else ''}.",
                )
                return redirect("investigations:deployment", deployment_id=deployment.pk)
        status = 400
    answers = engine_discovery.read_engines(urls, fetch_policy())
    report = engine_discovery.merge(answers)
    proposals = propose(Deployment(), report.values())
    if form is None:
        initial: dict[str, object] = {p.field: p.value for p in proposals}
        initial["name"] = _suggested_name(report.values().get("served_model"))
        form = NewDeploymentForm(initial=initial, teams=teams)
    labels = {f.name: f.label for f in form}
    proposed = {p.field for p in proposals}
    replicas = engine_discovery.replica_names([a.url for a in answers])
    targets = [
        (kind, replica, url, TargetKind(kind).label)
        for answer, replica in zip(answers, replicas, strict=True)
        for kind, url in answer.targets
    ]
    context = {
        "urls_form": urls_form,
        "urls_text": " ".join(urls),
        "form": form,
        "read": True,
        "answers": answers,
        "readings": list(report.readings.values()),
        "problems": report.problems,
        "proposals": [
            (
                labels.get(p.field, p.field),
                p,
                [report.readings[k].source for k in p.keys if k in report.readings],
            )
            for p in proposals
        ],
        "identity_fields": [f for f in form if f.name in ("team_choice", *IDENTITY_FIELDS)],
        "budget_fields": [f for f in form if f.name in BUDGET_FIELDS],
        "not_reported": [labels[name] for name in BUDGET_FIELDS if name not in proposed],
        "targets": targets,
        "refused": refused,
    }
    return render(request, "discovery/from_engine.html", context, status=status)


@require_http_methods(["GET", "POST"])
def prometheus_discovery(request: HttpRequest, deployment_id) -> HttpResponse:
    """Ask a Prometheus what it scrapes (``step=discover``), then register the chosen new
    instances (``step=register``: discovery runs again, so only what Prometheus lists now
    is registered, never a URL from the form)."""
    deployment = deployment_access(request.user, deployment_id, Role.COMMANDER).obj
    context: dict[str, object] = {"deployment": deployment}
    if request.method == "GET":
        known = deployment.targets.filter(kind=TargetKind.PROMETHEUS).first()
        context["form"] = PrometheusForm(initial={"prometheus_url": known.url if known else ""})
        return render(request, "discovery/prometheus.html", context)
    form = PrometheusForm(request.POST)
    context["form"] = form
    if not form.is_valid():
        return render(request, "discovery/prometheus.html", context, status=400)
    try:
        found = discovery.discover(
            form.cleaned_data["prometheus_url"], form.cleaned_data["selector"], fetch_policy()
        )
    except (ProbeError, ValueError) as exc:
        context["error"] = str(exc)
        return render(request, "discovery/prometheus.html", context)
    registered = [
        discovery.Registered(t.kind, t.url, t.replica, t.enabled)
        for t in deployment.targets.probed()
    ]
    comparison = discovery.compare(found.found, found.prometheus, registered)
    context.update(discovered=found, comparison=comparison)
    if request.POST.get("step") == "register":
        chosen = set(request.POST.getlist("chosen"))
        wanted = [
            onboard.Wanted(r.spec.kind, r.spec.url, r.spec.replica, dict(r.spec.queries))
            for r in comparison.new
            if r.found.key in chosen and r.spec is not None
        ]
        if not wanted:
            context["error"] = "Choose at least one new instance to register."
            return render(request, "discovery/prometheus.html", context, status=400)
        try:
            targets = onboard.register(deployment=deployment, targets=wanted, user=request.user)
        except onboard.TargetRefused as exc:
            context["error"] = str(exc)
            return render(request, "discovery/prometheus.html", context, status=400)
        messages.success(
            request,
            f"Registered {len(targets)} target{'s' if len(targets) != 1 else ''} "
            f"from {found.prometheus}.",
        )
        return redirect("investigations:deployment", deployment_id=deployment.pk)
    return render(request, "discovery/prometheus.html", context)
