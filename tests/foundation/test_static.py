"""The UI shell's scripts come from local files, never a CDN."""

from __future__ import annotations

import re
from pathlib import Path

import plotly
import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse


def test_plotly_js_is_the_file_inside_the_plotly_wheel():
    found = finders.find("vendor/plotly/plotly.min.js")
    assert found is not None
    # Resolved: the virtual environment may be reached through a symlink.
    assert Path(found).resolve().is_relative_to(Path(plotly.__file__).resolve().parent)


@pytest.mark.django_db
def test_static_files_are_served_by_the_app(client):
    response = client.get("/static/vendor/plotly/plotly.min.js")
    assert response.status_code == 200
    head = b"".join(response.streaming_content)[:300] if response.streaming else b""
    assert b"plotly.js" in head


def test_pages_reference_no_external_hosts(client_for, commander, team):
    page = client_for(commander).get(reverse("teams:detail", args=[team.id])).content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources
    assert all(not s.startswith(("http://", "https://", "//")) for s in sources), sources
    assert any("htmx" in s for s in sources)
