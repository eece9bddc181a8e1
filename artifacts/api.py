"""Artifact API: upload to an investigation (raw body or multipart) and read the result.

``POST /api/v1/investigations/<id>/artifacts?name=trace.json.gz[&kind=chrome-trace]`` with
the file as the body answers 202 with the artifact's id; ``GET /api/v1/artifacts/<id>``
reports queued / analysing / done (with findings and signals) / rejected (with the reason).
"""

from __future__ import annotations

from collections.abc import Iterator

from django.core.files.uploadhandler import StopUpload
from django.http import HttpRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from artifacts import actions, tasks, uploads
from artifacts.models import Artifact, Source
from investigations.api import _error, token_required
from investigations.models import Investigation

READ_CHUNK = 1 << 20


def artifact_json(request: HttpRequest, artifact: Artifact) -> dict:
    analysis = artifact.analysis or {}
    return {
        "id": str(artifact.pk),
        "url": request.build_absolute_uri(reverse("artifacts:detail", args=[artifact.pk])),
        "name": artifact.name,
        "kind": artifact.kind or None,
        "size_bytes": artifact.size_bytes,
        "sha256": artifact.sha256,
        "status": artifact.status,
        "reason": artifact.reason or None,
        "findings": analysis.get("findings", []),
        "signals": artifact.signals,
        "investigation": str(artifact.investigation_id) if artifact.investigation_id else None,
        # The team's first artifact with the same bytes, whose file and analysis this shares.
        "duplicate_of": str(artifact.duplicate_of_id) if artifact.duplicate_of_id else None,
    }


def _raw_body(request: HttpRequest) -> Iterator[bytes]:
    while chunk := request.read(READ_CHUNK):
        yield chunk


@token_required
@require_http_methods(["POST"])
def upload(request: HttpRequest, token, investigation_id) -> JsonResponse:
    found = Investigation.objects.filter(pk=investigation_id, team=token.team).first()
    if found is None:
        return _error(404, "no such investigation")
    if found.status != Investigation.Status.OPEN:  # before reading a byte of the body
        return _error(409, str(actions.ClosedInvestigation.for_closed()))
    if uploads.declared_too_large(request):
        return _error(413, "the file is larger than the artifact size limit")
    name = request.GET.get("name", "")
    kind = request.GET.get("kind", "")
    if request.content_type == "multipart/form-data":
        uploads.install(request)
        try:
            uploaded = request.FILES.get("file")
        except StopUpload:
            uploaded = None
        except MultiPartParserError as exc:  # e.g. a 5,000-character file name: JSON 400
            return _error(400, f"malformed multipart body: {exc}")
        if getattr(request, "artifact_too_large", False):
            return _error(413, "the file is larger than the artifact size limit")
        if uploaded is None:
            return _error(400, "multipart uploads carry the file in a part named 'file'")
        chunks, name = uploaded.chunks(), name or uploaded.name or ""
        kind = kind or request.POST.get("kind", "")
    else:
        chunks = _raw_body(request)
    if not name:
        return _error(400, "give the file's name (?name=...)")
    try:
        artifact = tasks.store_and_analyse(
            deployment=found.deployment,
            investigation=found,
            chunks=chunks,
            name=name,
            kind=kind,
            source=Source.API,
            user=None,
        )
    except actions.ClosedInvestigation as exc:
        return _error(409, str(exc))
    except actions.UploadRejected as exc:
        too_big = "larger than" in str(exc) or isinstance(exc, actions.QuotaExceeded)
        status = 413 if too_big else 400
        return _error(status, str(exc))
    return JsonResponse(artifact_json(request, artifact), status=202)


@token_required
@require_http_methods(["GET"])
def artifact(request: HttpRequest, token, artifact_id) -> JsonResponse:
    found = Artifact.objects.filter(pk=artifact_id, team=token.team).first()
    if found is None:
        return _error(404, "no such artifact")
    return JsonResponse(artifact_json(request, found))
