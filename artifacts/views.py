"""Artifact pages: upload to an investigation, watch the analysis, read it.

Thin: authorisation through ``access``, storing through ``actions``, the charts' data comes
from the stored analysis (files are never re-parsed by a page).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.files.uploadhandler import StopUpload
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_POST

from artifacts import actions, charts, tasks, uploads
from artifacts.access import get_artifact
from artifacts.models import Source
from investigations.access import get_investigation
from investigations.models import Investigation
from teams.models import Role


@csrf_exempt  # the bound must be installed before CSRF reads the body; checked below
@require_POST
def upload(request: HttpRequest, investigation_id) -> HttpResponse:
    uploads.install(request)
    return _upload(request, investigation_id)


@csrf_protect
def _upload(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    back = redirect("investigations:detail", investigation_id=investigation.pk)
    if investigation.status != Investigation.Status.OPEN:  # before reading the body
        messages.error(request, str(actions.ClosedInvestigation.for_closed()))
        return back
    if uploads.declared_too_large(request):
        messages.error(request, "That file is larger than the artifact size limit.")
        return back
    try:
        uploaded = request.FILES.get("file")
    except StopUpload:
        uploaded = None
    if getattr(request, "artifact_too_large", False):
        messages.error(request, "That file is larger than the artifact size limit.")
        return back
    if uploaded is None:
        messages.error(request, "Choose a file to upload.")
        return back
    try:
        artifact = tasks.store_and_analyse(
            deployment=investigation.deployment,
            investigation=investigation,
            chunks=uploaded.chunks(),
            name=uploaded.name or "artifact",
            kind=request.POST.get("kind", ""),
            source=Source.UPLOAD,
            user=request.user,
        )
    except actions.UploadRejected as exc:
        messages.error(request, str(exc))
        return back
    messages.success(request, f"{artifact.name} uploaded; analysis queued.")
    return back


@require_GET
def artifact_list(request: HttpRequest, investigation_id) -> HttpResponse:
    """The investigation's artifacts with their status, for htmx to refresh in place."""
    investigation = get_investigation(request.user, investigation_id)
    return render(
        request,
        "artifacts/_list.html",
        {"investigation": investigation, "artifacts": investigation.artifacts.all()[:50]},
    )


@require_GET
def detail(request: HttpRequest, artifact_id) -> HttpResponse:
    artifact = get_artifact(request.user, artifact_id)
    return render(
        request,
        "artifacts/detail.html",
        {
            "artifact": artifact,
            "analysis": artifact.analysis or {},
            "chart": charts.figure_json(artifact.analysis) if artifact.analysis else None,
        },
    )


@require_POST
def collect(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    if investigation.status != Investigation.Status.OPEN:
        messages.error(request, str(actions.ClosedInvestigation.for_closed()))
        return redirect("investigations:detail", investigation_id=investigation.pk)
    tasks.collect_artifacts.delay(str(investigation.pk), request.user.pk)
    messages.success(request, "Collecting from the deployment's profiler endpoints.")
    return redirect("investigations:detail", investigation_id=investigation.pk)
