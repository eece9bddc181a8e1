"""The Content-Security-Policy header and the templates' side of it, without a browser
(tests/trust/test_csp_browser.py loads the pages in Chromium)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from atlas_console.security import HEADER, render_policy

ROOT = Path(__file__).resolve().parents[2]


def _directives(header: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["login", "healthz"])
def test_every_response_carries_the_policy(client, name):
    response = client.get(reverse(name))
    policy = _directives(response[HEADER])
    assert policy["script-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["connect-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    # The one 'unsafe-' source: 'unsafe-hashes' in style-src, for plotly's empty style
    # attribute (test_style_attributes_are_admitted_only_when_empty_for_plotlys_colour_bars).
    assert all(
        "unsafe" not in source
        for directive, sources in policy.items()
        for source in sources
        if (directive, source) != ("style-src", "'unsafe-hashes'")
    )


def test_signed_in_pages_and_errors_carry_it_too(client_for, viewer, other_team):
    client = client_for(viewer)
    for path in (reverse("home"), reverse("teams:detail", args=[other_team.pk])):
        response = client.get(path)
        assert "script-src 'self'" in response[HEADER], (path, response.status_code)


@pytest.mark.parametrize(
    "policy",
    [
        {"script-src": ["'self'", "'unsafe-inline'"]},
        {"script-src": ["'self'", "'unsafe-eval'"]},
        {"script-src": ["'self'", "'unsafe-hashes'"]},  # would run inline on* handlers by hash
        {"script-src": ["*"]},
        {"default-src": ["'self'", "https:"]},
        {"style-src": ["'self'"]},  # no script-src nor default-src: anything goes
        {"script-src": ["'self'; report-uri https://evil.example"]},
        {"Script-Src": ["'self'"]},
    ],
)
def test_a_policy_that_lets_foreign_or_inline_script_run_is_refused(policy):
    with pytest.raises(ImproperlyConfigured):
        render_policy(policy)


def test_the_settings_policy_renders():
    from django.conf import settings

    header = render_policy(settings.ATLAS_CSP)
    assert header.startswith("default-src 'self'; script-src 'self'")


TEMPLATES = sorted(p for p in ROOT.glob("**/templates/**/*.html") if ".venv" not in p.parts)


def test_the_template_list_is_not_empty():
    assert len(TEMPLATES) > 20


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_templates_have_no_inline_script_or_handler(path):
    """Inline code would be blocked by the policy; keep it in static/js."""
    text = re.sub(r"\{#.*?#\}", "", path.read_text(encoding="utf-8"))  # template comments
    for match in re.finditer(r"<script\b([^>]*)>", text, flags=re.IGNORECASE):
        attributes = match.group(1)
        assert "src=" in attributes or 'type="application/json"' in attributes, match.group(0)
    assert not re.search(r"\son[a-z]+\s*=", text, flags=re.IGNORECASE)
    assert "javascript:" not in text.lower()
    assert not re.search(r"\shx-on[:-]", text), "hx-on runs through eval (allowEval is off)"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_post_form_carries_the_csrf_token(path):
    text = path.read_text(encoding="utf-8")
    for form in re.finditer(r"<form\b[^>]*>(.*?)</form>", text, flags=re.IGNORECASE | re.DOTALL):
        if re.search(r"method=\"post\"", form.group(0), flags=re.IGNORECASE):
            assert "{% csrf_token %}" in form.group(1), form.group(0)[:200]


def test_htmx_sends_the_csrf_token_and_is_configured_for_the_policy():
    base = (ROOT / "templates" / "base.html").read_text(encoding="utf-8")
    assert """hx-headers='{"X-CSRFToken": "{{ csrf_token }}"}'""" in base
    assert '"includeIndicatorStyles": false' in base
    assert '"allowEval": false' in base


def test_only_plotlys_own_two_inline_styles_are_admitted():
    from atlas_console.security import plotly_style_hashes, style_hash

    hashes = plotly_style_hashes()
    assert len(hashes) == 2
    assert hashes[0] == style_hash("") == "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"


def test_style_attributes_are_admitted_only_when_empty_for_plotlys_colour_bars():
    """plotly.js's colour bar sets ``style=""`` on its fills (a refusal on the artifact
    page's trace chart, tests/browser/test_artifact_page.py). 'unsafe-hashes' lets the
    admitted hashes cover attributes too, and the only admitted hashes are the empty
    string's and plotly's map CSS: no declaration an attacker could use."""
    from atlas_console.security import (
        plotly_sets_empty_style_attributes,
        plotly_style_hashes,
        with_plotly_styles,
    )

    assert plotly_sets_empty_style_attributes()
    styles = with_plotly_styles({"style-src": ["'self'"]})["style-src"]
    assert styles == ["'self'", "'unsafe-hashes'", *plotly_style_hashes()]
    assert not any("unsafe-inline" in s for s in styles)
    assert with_plotly_styles({"script-src": ["'self'"]}) == {"script-src": ["'self'"]}
