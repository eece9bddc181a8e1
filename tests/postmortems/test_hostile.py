"""Typed text is text everywhere: in the page, in Markdown and in the PDF. And the PDF
renderer reaches nothing outside the document, whatever the document says."""

from __future__ import annotations

import subprocess

import pytest
from django.urls import reverse

from postmortems import tasks
from postmortems.markdown import render_markdown
from postmortems.models import Export
from postmortems.record import load_document
from tests.postmortems.conftest import need_poppler, need_weasyprint

SCRIPT = "<script>alert('pm')</script>"
METADATA_IMG = '<img src="http://169.254.169.254/latest/meta-data/">'
MD_LINK = "[totally safe](javascript:alert(1))"
HOSTILE = f"{SCRIPT}\n\n{METADATA_IMG}\n\n# Injected heading\n\n{MD_LINK}"


@pytest.fixture
def hostile(client_for, responder, incident):
    client = client_for(responder)
    response = client.post(
        reverse("postmortems:edit", args=[incident.pk]),
        {"base_version": 0, "summary": HOSTILE, "lucky": "| a | b |\n|---|---|"},
    )
    assert response.status_code == 302
    return client


def test_hostile_narrative_is_escaped_in_the_page(hostile, incident):
    page = hostile.get(reverse("postmortems:detail", args=[incident.pk])).content.decode()
    document = page[page.index('<article class="postmortem">') : page.index("</article>")]
    assert "<script>" not in document and "<img" not in document
    assert "&lt;script&gt;alert(&#x27;pm&#x27;)&lt;/script&gt;" in document
    assert "&lt;img src=&quot;http://169.254.169.254/latest/meta-data/&quot;&gt;" in document
    assert 'href="javascript:' not in page


def test_hostile_narrative_is_escaped_in_markdown(hostile, incident):
    md = render_markdown(load_document(incident))
    assert "<script>" not in md and "<img" not in md
    assert "&lt;script&gt;alert('pm')&lt;/script&gt;" in md
    assert "\\# Injected heading" in md and "\n# Injected heading" not in md
    assert "\\[totally safe\\](javascript:alert(1))" in md
    assert "\\| a \\| b \\|" in md  # no table can be smuggled in


@pytest.mark.slow
def test_hostile_narrative_is_text_in_the_pdf_and_nothing_is_fetched(
    hostile, incident, media, monkeypatch, django_capture_on_commit_callbacks
):
    need_poppler()
    pdf = need_weasyprint()
    asked: list[str] = []
    real_fetch = pdf.LocalOnlyFetcher.fetch

    def spy(self, url, headers=None):
        asked.append(url)
        return real_fetch(self, url, headers)

    monkeypatch.setattr(pdf.LocalOnlyFetcher, "fetch", spy)
    with django_capture_on_commit_callbacks(execute=False):
        hostile.post(reverse("postmortems:export", args=[incident.pk]), {"format": "pdf"})
    export = Export.objects.get()
    assert tasks.export_postmortem.apply(args=[str(export.pk)]).get() == "done"
    export.refresh_from_db()
    text = subprocess.run(
        ["pdftotext", export.file.path, "-"], check=True, capture_output=True, text=True
    ).stdout
    assert SCRIPT in text  # shown as the characters typed
    assert "169.254.169.254/latest/meta-data/" in text
    assert asked == []  # the document needed nothing from anywhere


def test_the_url_fetcher_refuses_everything_but_data_uris():
    pdf = need_weasyprint()
    fetcher = pdf.LocalOnlyFetcher()
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "https://example.com/logo.png",
        "file:///etc/passwd",
        "ftp://example.com/x",
        "  HTTP://127.0.0.1:8000/admin/",
    ):
        with pytest.raises(pdf.ExternalResourceRefused):
            fetcher.fetch(url)
    assert len(fetcher.refused) == 5
    response = fetcher.fetch("data:text/plain;base64,aGVsbG8=")
    try:
        assert response.read() == b"hello"
    finally:
        response.close()


def test_weasyprint_renders_without_what_it_was_refused():
    """Even unescaped markup pointing outside gets nothing: the image and stylesheet are
    refused, and the rest of the document still renders."""
    pdf = need_weasyprint()
    fetcher = pdf.LocalOnlyFetcher()
    html = (
        '<html><head><link rel="stylesheet" href="http://169.254.169.254/x.css">'
        "<style>@import url('file:///etc/passwd');</style></head>"
        f"<body><p>still here</p>{METADATA_IMG}</body></html>"
    )
    data = pdf.html_to_pdf(html, fetcher)
    assert data.startswith(b"%PDF-")
    assert "http://169.254.169.254/latest/meta-data/" in fetcher.refused
    assert "http://169.254.169.254/x.css" in fetcher.refused
    assert "file:///etc/passwd" in fetcher.refused
