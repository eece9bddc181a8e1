"""The postmortem as PDF, with WeasyPrint, which must never fetch anything.

The document is rendered from the same template as the page, with the print stylesheet
inlined and the chart as inline SVG, so it needs no resource at all. The URL fetcher
refuses every URL except ``data:`` URIs anyway: narrative text is escaped before it gets
here, but if anything ever slipped a reference through (``<img src="http://169.254…">``,
a stylesheet ``@import``, ``file:///etc/passwd``), the worker would still reach nothing.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path

from django.contrib.staticfiles import finders
from django.template.loader import render_to_string
from weasyprint import HTML
from weasyprint.urls import URLFetcher

from postmortems.svg import alarm_chart

log = logging.getLogger(__name__)


class ExternalResourceRefused(ValueError):
    """The document referred to something outside itself."""


class LocalOnlyFetcher(URLFetcher):
    """A WeasyPrint URL fetcher that serves ``data:`` URIs and refuses everything else.

    Refusals are recorded (``refused``) and are not fatal: the resource is left out and the
    rest of the document still renders.
    """

    def __init__(self) -> None:
        super().__init__(
            timeout=1, allowed_protocols=("data",), allow_redirects=False, fail_on_errors=False
        )
        self.refused: list[str] = []

    def fetch(self, url, headers=None):
        if not str(url).lstrip().lower().startswith("data:"):
            self.refused.append(str(url)[:500])
            raise ExternalResourceRefused(f"refused {str(url)[:200]!r}: only data: URIs")
        return super().fetch(url, headers)


@cache
def document_css() -> str:
    """The print stylesheet's text, to inline (the PDF links to nothing)."""
    found = finders.find("css/print.css")
    if not found:
        raise RuntimeError("static css/print.css is missing")
    return Path(found).read_text(encoding="utf-8")


def render_html(doc: dict) -> str:
    """The standalone HTML the PDF is made from."""
    return render_to_string(
        "postmortems/pdf.html",
        {"doc": doc, "chart_svg": alarm_chart(doc["chart"]), "css": document_css()},
    )


def html_to_pdf(html: str, fetcher: LocalOnlyFetcher | None = None) -> bytes:
    fetcher = fetcher or LocalOnlyFetcher()
    pdf = HTML(string=html, base_url=None, url_fetcher=fetcher).write_pdf()
    if fetcher.refused:
        log.warning("postmortem.pdf.refused", extra={"urls": fetcher.refused[:10]})
    return pdf


def render_pdf(doc: dict) -> bytes:
    return html_to_pdf(render_html(doc))
