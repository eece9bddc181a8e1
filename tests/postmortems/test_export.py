"""Exports: a row queued on commit, rendered by the task (claimed once, idempotent under
redelivery), polled by the page, downloaded as an attachment. The PDF carries the record
and its chart is vector drawing, not a picture."""

from __future__ import annotations

import re
import subprocess
import zlib
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from postmortems import tasks
from postmortems.models import Export
from tests.postmortems.conftest import need_poppler, need_weasyprint


def _request(client, investigation, fmt: str, capture) -> Export:
    with capture(execute=False) as callbacks:
        response = client.post(
            reverse("postmortems:export", args=[investigation.pk]), {"format": fmt}
        )
    assert response.status_code == 302
    assert len(callbacks) == 1  # enqueued only once the row is committed
    export = Export.objects.get(format=fmt)
    assert export.status == Export.Status.QUEUED
    return export


def _pdf_text(path) -> str:
    return subprocess.run(
        ["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True, text=True
    ).stdout


def _content_streams(data: bytes) -> list[bytes]:
    out = []
    for match in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        try:
            out.append(zlib.decompress(match[1]))
        except zlib.error:
            out.append(match[1])
    return out


@pytest.mark.slow
def test_a_pdf_export_carries_the_record_and_a_vector_chart(
    client_for, responder, incident, media, django_capture_on_commit_callbacks
):
    need_poppler()
    need_weasyprint()
    export = _request(client_for(responder), incident, "pdf", django_capture_on_commit_callbacks)
    assert tasks.export_postmortem.apply(args=[str(export.pk)]).get() == "done"
    export.refresh_from_db()
    assert export.status == "done" and export.attempts == 1 and export.finished_at
    path = export.file.path
    text = " ".join(_pdf_text(path).split())
    assert "The KV cache is full; admission stalls and requests are preempted" in text
    for title, key in (
        ("The router is slow to forward requests", "router-latency"),
        ("Prefill takes longer than tokens x cost per token", "prefill-slow"),
        ("KV blocks of finished requests are never returned", "kv-block-leak"),
    ):
        assert f"{title} {key} eliminated" in text
    assert "Router p95 is 4 ms, far under 20 ms" in text  # the reason, with its evidence
    assert "AtlasKVCachePressure" in text and "atlas-regression-gates" in text
    assert "passing" in text
    # The chart is drawn, not pasted: no raster image anywhere, and the page that holds the
    # chart strokes a long polyline (one lineto per stored observation).
    images = subprocess.run(
        ["pdfimages", "-list", path], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert len(images) == 2, images  # the two header lines, no image rows
    streams = _content_streams(Path(path).read_bytes())
    linetos = max(len(re.findall(rb"[-\d.]+ [-\d.]+ l\b", s)) for s in streams)
    assert linetos > 100
    assert any(re.search(rb"\bS\b", s) for s in streams)  # stroked paths


def test_a_markdown_export_downloads_as_an_attachment(
    client_for, responder, viewer, incident, media, django_capture_on_commit_callbacks
):
    export = _request(
        client_for(responder), incident, "markdown", django_capture_on_commit_callbacks
    )
    tasks.export_postmortem.apply(args=[str(export.pk)])
    response = client_for(viewer).get(
        reverse("postmortems:download", args=[incident.pk, export.pk])
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    disposition = response["Content-Disposition"]
    assert disposition.startswith("attachment;")
    assert 'filename="postmortem-p95-time-to-first-token-over-target-on-atlas-prod.md"' in (
        disposition
    )
    body = b"".join(response.streaming_content).decode()
    assert body.startswith("# Postmortem:") and "AtlasKVCachePressure" in body


@pytest.mark.slow
def test_a_pdf_download_has_the_pdf_content_type(
    client_for, responder, incident, media, django_capture_on_commit_callbacks
):
    need_weasyprint()
    client = client_for(responder)
    export = _request(client, incident, "pdf", django_capture_on_commit_callbacks)
    tasks.export_postmortem.apply(args=[str(export.pk)])
    response = client.get(reverse("postmortems:download", args=[incident.pk, export.pk]))
    assert response["Content-Type"] == "application/pdf"
    assert response["Content-Disposition"].startswith("attachment;")
    assert b"".join(response.streaming_content).startswith(b"%PDF-")


def test_redelivery_renders_nothing_twice(
    client_for, responder, incident, media, django_capture_on_commit_callbacks
):
    export = _request(
        client_for(responder), incident, "markdown", django_capture_on_commit_callbacks
    )
    assert tasks.export_postmortem.apply(args=[str(export.pk)]).get() == "done"
    export.refresh_from_db()
    first = (export.file.name, export.finished_at)
    assert tasks.export_postmortem.apply(args=[str(export.pk)]).get() == "skipped"
    export.refresh_from_db()
    assert (export.file.name, export.finished_at) == first and export.attempts == 1


def test_a_render_in_progress_is_left_alone_and_an_abandoned_one_retaken(
    client_for, responder, incident, media, django_capture_on_commit_callbacks
):
    export = _request(
        client_for(responder), incident, "markdown", django_capture_on_commit_callbacks
    )
    Export.objects.filter(pk=export.pk).update(status="rendering", started_at=timezone.now())
    assert tasks.export_postmortem.apply(args=[str(export.pk)]).get() == "skipped"
    long_ago = timezone.now() - timedelta(hours=1)  # its worker died
    Export.objects.filter(pk=export.pk).update(started_at=long_ago)
    assert tasks.export_postmortem.apply(args=[str(export.pk)]).get() == "done"


def test_a_failed_render_says_why(
    client_for, responder, incident, media, monkeypatch, django_capture_on_commit_callbacks
):
    client = client_for(responder)
    export = _request(client, incident, "pdf", django_capture_on_commit_callbacks)

    def broken(_export):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(tasks, "render_export", broken)
    assert tasks.export_postmortem.apply(args=[str(export.pk)]).get() == "failed"
    export.refresh_from_db()
    assert export.status == "failed" and export.reason == "rendering failed (RuntimeError)"
    download = reverse("postmortems:download", args=[incident.pk, export.pk])
    assert client.get(download).status_code == 404
    status = client.get(reverse("postmortems:exports", args=[incident.pk])).content.decode()
    assert "rendering failed (RuntimeError)" in status


def test_the_status_partial_polls_until_the_export_is_done(
    client_for, responder, viewer, incident, media, django_capture_on_commit_callbacks
):
    export = _request(
        client_for(responder), incident, "markdown", django_capture_on_commit_callbacks
    )
    client = client_for(viewer)
    url = reverse("postmortems:exports", args=[incident.pk])
    pending = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert 'hx-trigger="every 2s"' in pending and "Queued" in pending
    assert "<html" not in pending  # the partial alone
    tasks.export_postmortem.apply(args=[str(export.pk)])
    done = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "hx-trigger" not in done
    assert reverse("postmortems:download", args=[incident.pk, export.pk]) in done


@pytest.mark.parametrize("fmt", ["docx", ""])
def test_only_markdown_and_pdf_can_be_requested(client_for, responder, incident, fmt):
    client_for(responder).post(reverse("postmortems:export", args=[incident.pk]), {"format": fmt})
    assert not Export.objects.exists()


def test_an_htmx_request_gets_the_status_partial_back(
    client_for, responder, incident, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client_for(responder).post(
            reverse("postmortems:export", args=[incident.pk]),
            {"format": "pdf"},
            headers={"HX-Request": "true"},
        )
    assert response.status_code == 200 and len(callbacks) == 1
    partial = response.content.decode()
    assert partial.startswith('<div id="export-status"') and 'hx-trigger="every 2s"' in partial
