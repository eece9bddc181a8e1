"""The Content-Security-Policy header (Django 5.2 has none built in).

The policy comes from ``settings.ATLAS_CSP`` (directive -> sources) and is rendered once
per process. Every response gets it unless a view set its own. Pages carry no inline
script and no ``on*=`` handler (static/js holds all script), so ``script-src 'self'``
holds; htmx's injected indicator ``<style>`` is disabled through its meta config in
``templates/base.html``, and the only inline styles admitted are plotly.js's own two,
by hash (``plotly_style_hashes``). plotly.js also sets an empty ``style=""`` attribute on
the fill of every colour bar; with ``'unsafe-hashes'`` those same hashes also admit that
empty attribute, and no other style attribute (``plotly_sets_empty_style_attributes``).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse

from audit.text import safe_querydict

HEADER = "Content-Security-Policy"
_DIRECTIVE = re.compile(r"^[a-z][a-z-]*$")
_FORBIDDEN_SCRIPT_SOURCES = {
    "'unsafe-inline'",
    "'unsafe-eval'",
    "'unsafe-hashes'",
    "*",
    "data:",
    "http:",
    "https:",
}


def render_policy(policy: Mapping[str, Sequence[str]]) -> str:
    """``{"script-src": ["'self'"]}`` -> ``"script-src 'self'"``; refuses a malformed
    directive and any policy that would let inline or foreign scripts run."""
    parts = []
    for directive, sources in policy.items():
        if not _DIRECTIVE.match(directive):
            raise ImproperlyConfigured(f"ATLAS_CSP: bad directive name {directive!r}")
        for source in sources:
            if not source or any(c in source for c in ";,\r\n"):
                raise ImproperlyConfigured(f"ATLAS_CSP: bad source {source!r} in {directive}")
        parts.append(" ".join([directive, *sources]))
    scripts = set(policy.get("script-src", policy.get("default-src", ())))
    if not scripts or scripts & _FORBIDDEN_SCRIPT_SOURCES:
        raise ImproperlyConfigured(
            "ATLAS_CSP: script-src must be set and must not allow inline, eval or any host"
        )
    return "; ".join(parts)


# plotly.js: ``createElement("style"); x.id="..."; x.textContent='<fixed CSS>'``.
_PLOTLY_STYLE = re.compile(
    r"""createElement\("style"\);\w+\.id="\w+",\w+\.textContent='([^'\\]*)'"""
)


def style_hash(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()
    return f"'sha256-{digest}'"


@cache
def plotly_style_hashes() -> tuple[str, ...]:
    """Hashes of the two <style> elements plotly.js inserts: the empty one it fills through
    the CSSOM (``insertRule`` is not governed by CSP) and its fixed map CSS. Read from the
    very file the site serves (the vendored bundle, ``atlas_console.plotly_bundle``), so a
    plotly upgrade cannot silently break the charts."""
    from atlas_console.plotly_bundle import PLOTLY_DIR, PLOTLY_FILE

    try:
        source = (PLOTLY_DIR / PLOTLY_FILE).read_text(encoding="utf-8")
    except OSError:
        return ()
    return (style_hash(""), *(style_hash(m.group(1)) for m in _PLOTLY_STYLE.finditer(source)))


# plotly.js's colour bar: ``selectAll("rect.cbfill").attr("style","")`` and the same on
# each fill it appends. Setting a style attribute is governed by style-src even when empty.
_PLOTLY_EMPTY_STYLE_ATTRIBUTE = re.compile(r"""\.attr\("style",""\)""")


@cache
def plotly_sets_empty_style_attributes() -> bool:
    """Whether the served plotly.js sets ``style=""`` (its colour bars do): then style-src
    needs ``'unsafe-hashes'`` so that the empty string's hash, already admitted for
    plotly's empty <style> element, also admits the empty attribute. Every other style
    attribute stays refused: the only other admitted hash is plotly's map CSS, a style
    sheet rather than a declaration list."""
    from atlas_console.plotly_bundle import PLOTLY_DIR, PLOTLY_FILE

    try:
        source = (PLOTLY_DIR / PLOTLY_FILE).read_text(encoding="utf-8")
    except OSError:
        return False
    return bool(_PLOTLY_EMPTY_STYLE_ATTRIBUTE.search(source))


def with_plotly_styles(policy: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    merged = {directive: list(sources) for directive, sources in policy.items()}
    if "style-src" in merged:
        hashes = plotly_style_hashes()
        styles = merged["style-src"]
        if style_hash("") in hashes and plotly_sets_empty_style_attributes():
            styles += [s for s in ("'unsafe-hashes'",) if s not in styles]
        styles += [h for h in hashes if h not in styles]
    return merged


@cache
def _header_value(items: tuple) -> str:
    return render_policy(with_plotly_styles(dict(items)))


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if HEADER not in response:
            policy = getattr(settings, "ATLAS_CSP", {})
            response[HEADER] = _header_value(tuple((k, tuple(v)) for k, v in policy.items()))
        return response


class SafeTextMiddleware:
    """Query strings and form posts with NUL and lone surrogates made safe (``audit.text``)
    before any view or form reads them (issue 19.5).

    A form's CharField already refuses NUL, but views read some fields straight from
    ``request.POST`` and search pages from ``request.GET``: on PostgreSQL a NUL there was a
    500. The body is still parsed lazily, when a view first reads ``request.POST``: an
    upload view installs its size bound before that (artifacts.uploads), so the request's
    class gains a parse step that cleans what the parse produced, for url-encoded and
    multipart bodies alike. JSON bodies are cleaned by the API's own parser.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.GET = safe_querydict(request.GET)
        request.__class__ = _safe_text_request(type(request))
        return self.get_response(request)


@cache
def _safe_text_request(base: type[HttpRequest]) -> type[HttpRequest]:
    """``base`` (WSGIRequest, ASGIRequest) whose form parse cleans its own output."""

    def _load_post_and_files(self) -> None:
        base._load_post_and_files(self)  # type: ignore[attr-defined]
        self._post = safe_querydict(self._post)

    return type(f"SafeText{base.__name__}", (base,), {"_load_post_and_files": _load_post_and_files})
