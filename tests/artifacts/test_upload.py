"""Uploading artifacts in the browser and through the API: bounds, roles, queueing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from artifacts.models import Artifact, Status
from artifacts.tasks import analyse_artifact
from investigations import actions
from investigations.tokens import create_token
from tests.support import builders

GARBAGE = b"#!/bin/sh\necho this is not a profiler artifact\n"


@pytest.fixture(autouse=True)
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def investigation(team, commander):
    deployment = builders.deployment(team)
    return actions.open_investigation(deployment=deployment, symptom="gpu-oom", user=commander)


def _upload(client, investigation, content: bytes, name="trace.json", kind=""):
    return client.post(
        reverse("artifacts:upload", args=[investigation.pk]),
        {"file": SimpleUploadedFile(name, content), "kind": kind},
    )


def test_a_responder_uploads_and_the_analysis_is_queued_after_commit(
    client_for, responder, investigation, media, django_capture_on_commit_callbacks
):
    client = client_for(responder)
    with django_capture_on_commit_callbacks() as callbacks:
        response = _upload(client, investigation, GARBAGE, name="../../etc/passwd")
    assert response.status_code == 302
    artifact = Artifact.objects.get()
    assert (artifact.status, artifact.size_bytes) == (Status.QUEUED, len(GARBAGE))
    assert artifact.sha256 == hashlib.sha256(GARBAGE).hexdigest()
    assert artifact.name == "passwd"  # shown, never used as a path
    stored = Path(artifact.file.path)
    assert stored.is_relative_to(media) and stored.read_bytes() == GARBAGE
    assert len(callbacks) == 1
    assert investigation.timeline.filter(kind="artifact", summary__contains="uploaded").exists()


def test_garbage_is_rejected_with_the_reason_and_the_file_kept(investigation, responder):
    artifact = _store(investigation, GARBAGE)
    assert analyse_artifact.apply(args=[str(artifact.pk)]).get() == Status.REJECTED
    artifact.refresh_from_db()
    assert artifact.status == Status.REJECTED
    assert "not a memory snapshot" in artifact.reason
    assert Path(artifact.file.path).read_bytes() == GARBAGE  # nothing lost
    assert investigation.timeline.filter(summary__contains="rejected").exists()
    # A redelivered task does not redo a finished row.
    assert analyse_artifact.apply(args=[str(artifact.pk)]).get() == "skipped"


def test_a_declared_kind_that_does_not_match_is_rejected_not_guessed(investigation):
    artifact = _store(investigation, GARBAGE, kind="memory-snapshot")
    analyse_artifact.apply(args=[str(artifact.pk)])
    artifact.refresh_from_db()
    assert artifact.status == Status.REJECTED and artifact.reason


def _store(investigation, content: bytes, kind: str = "") -> Artifact:
    from artifacts.actions import store

    return store(
        deployment=investigation.deployment,
        investigation=investigation,
        chunks=[content],
        name="upload.bin",
        kind=kind,
        source="upload",
    )


def test_viewers_cannot_upload_and_outsiders_cannot_see(
    client_for, viewer, outsider, investigation
):
    assert _upload(client_for(viewer), investigation, GARBAGE).status_code == 403
    assert _upload(client_for(outsider), investigation, GARBAGE).status_code == 404
    assert not Artifact.objects.exists()


def test_an_upload_over_the_limit_is_refused_and_nothing_is_kept(
    settings, client_for, responder, investigation, media
):
    settings.ATLAS_ARTIFACT_MAX_BYTES = 1024
    response = _upload(client_for(responder), investigation, b"x" * 200_000)
    assert response.status_code == 302
    assert not Artifact.objects.exists()
    assert not any(p.is_file() for p in Path(media).rglob("*")) if Path(media).exists() else True


def test_empty_files_and_unknown_kinds_are_refused(client_for, responder, investigation):
    client = client_for(responder)
    _upload(client, investigation, b"")
    _upload(client, investigation, GARBAGE, kind="core-dump")
    assert not Artifact.objects.exists()


@pytest.fixture
def token(team, commander):
    return create_token(team=team, name="ci", user=commander)[1]


def _api_post(client, investigation, body: bytes, token, query="?name=snap.pickle"):
    url = reverse("artifacts:api_upload", args=[investigation.pk]) + query
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(url, data=body, content_type="application/octet-stream", **headers)


def test_the_api_takes_a_raw_body_and_reports_status(client, investigation, token):
    response = _api_post(client, investigation, GARBAGE, token)
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "queued" and body["size_bytes"] == len(GARBAGE)
    analyse_artifact.apply(args=[body["id"]])
    status = client.get(
        reverse("artifacts:api_artifact", args=[body["id"]]),
        HTTP_AUTHORIZATION=f"Bearer {token}",
    ).json()
    assert status["status"] == "rejected" and "not a memory snapshot" in status["reason"]


def test_the_api_refuses_bad_tokens_missing_names_and_oversize_bodies(
    settings, client, investigation, token, other_team, outsider
):
    assert _api_post(client, investigation, GARBAGE, None).status_code == 401
    assert _api_post(client, investigation, GARBAGE, "atl_wrong").status_code == 401
    assert _api_post(client, investigation, GARBAGE, token, query="").status_code == 400
    foreign = create_token(team=other_team, name="x", user=outsider)[1]
    assert _api_post(client, investigation, GARBAGE, foreign).status_code == 404
    settings.ATLAS_ARTIFACT_MAX_BYTES = 1024
    response = _api_post(client, investigation, b"x" * 2_000_000, token)
    assert response.status_code == 413
    assert not Artifact.objects.exists()


def test_the_team_quota_refuses_uploads_past_it_on_the_web_and_the_api(
    settings, client_for, responder, client, investigation, token, other_team, media
):
    """Issue 19, finding 3: 20 x the same 5 MB were all kept. Past the team's quota an
    upload is refused with the quota in the message, through the browser form and the API
    alike, and nothing of it is stored; another team's quota is its own."""
    settings.ATLAS_ARTIFACT_TEAM_QUOTA_BYTES = 3 * 4096
    web = client_for(responder)
    for i in range(3):  # distinct bytes: the same ones twice count once (test_dedup)
        assert _upload(web, investigation, bytes([i]) * 4096, name=f"{i}.bin").status_code == 302
    assert Artifact.objects.count() == 3
    block = b"\xff" * 4096
    response = _upload(web, investigation, block, name="one-more.bin")
    assert response.status_code == 302
    follow = web.get(response["Location"])
    assert "artifact storage quota is full" in follow.content.decode()
    response = _api_post(client, investigation, block, token)
    assert response.status_code == 413, response.content
    assert "quota is full" in response.json()["error"]
    assert Artifact.objects.count() == 3
    assert len(list((media / "artifacts").rglob("*"))) == 1 + 3  # the team folder, 3 files
    Artifact.objects.filter(name="0.bin").delete()  # a deleted artifact frees its share
    assert _api_post(client, investigation, block, token).status_code == 202
