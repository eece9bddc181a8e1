"""The UI shell's scripts come from local files, never a CDN."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse


def test_plotly_js_is_the_vendored_bundle():
    """The pinned partial bundle under static/vendor (tests/foundation/test_plotly_bundle.py
    checks it against its pin); the full plotly.min.js is no longer served."""
    from atlas_console.plotly_bundle import PLOTLY_DIR, PLOTLY_FILE, PUBLIC_PATH

    found = finders.find(PUBLIC_PATH)
    assert found is not None
    assert Path(found).resolve() == (PLOTLY_DIR / PLOTLY_FILE).resolve()
    assert finders.find("vendor/plotly/plotly.min.js") is None


@pytest.mark.django_db
def test_static_files_are_served_by_the_app(client):
    response = client.get("/static/vendor/plotly/plotly-cartesian.min.js")
    assert response.status_code == 200
    head = b"".join(response.streaming_content)[:300] if response.streaming else b""
    assert b"plotly.js" in head


def test_pages_reference_no_external_hosts(client_for, commander, team):
    page = client_for(commander).get(reverse("teams:detail", args=[team.id])).content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources
    assert all(not s.startswith(("http://", "https://", "//")) for s in sources), sources
    assert any("htmx" in s for s in sources)


def test_no_script_blocks_the_investigation_page_and_charts_js_loads_plotly(
    client_for, commander, team
):
    """Issue 17: the page paints and htmx asks for the evidence without waiting for
    plotly.js. Every script is deferred; plotly.js is not in the HTML at all: charts.js
    loads the file its data-plotly attribute names (after load, or when a chart is seen)."""
    from django.templatetags.static import static

    from atlas_console.plotly_bundle import PUBLIC_PATH
    from investigations import actions
    from tests.support import builders

    investigation = actions.open_investigation(
        deployment=builders.deployment(team), symptom="high-ttft", user=commander
    )
    url = reverse("investigations:detail", args=[investigation.pk])
    page = client_for(commander).get(url).content.decode()
    scripts = re.findall(r"<script\b[^>]*\bsrc=[^>]*>", page)
    assert len(scripts) >= 3  # htmx, charts.js, tree.js
    assert all(re.search(r"\sdefer[\s>]", s) for s in scripts), scripts
    assert not any("plotly" in s.split("data-plotly")[0] for s in scripts), scripts
    (charts,) = [s for s in scripts if "js/charts" in s]
    assert f'data-plotly="{static(PUBLIC_PATH)}"' in charts


_MANIFEST_PROBE = r"""
import json, re
from django.contrib.staticfiles.storage import staticfiles_storage
from django.test import Client
c = Client(HTTP_HOST="127.0.0.1")
login = c.get("/accounts/login/")
assert login.status_code == 200, login.status_code
page = login.content.decode()
css = re.search(r'href="(/static/css/atlas\.[0-9a-f]{12}\.css)"', page).group(1)
plotly = staticfiles_storage.url("vendor/plotly/plotly-cartesian.min.js")
r = c.get(plotly, HTTP_ACCEPT_ENCODING="br, gzip")
body = b"".join(r.streaming_content)
unhashed = c.get("/static/vendor/plotly/plotly-cartesian.min.js").status_code
print(json.dumps({
    "css": css, "plotly": plotly, "status": r.status_code,
    "encoding": r.get("Content-Encoding"), "cache": r.get("Cache-Control"),
    "bytes": len(body), "unhashed": unhashed,
}))
"""


@pytest.mark.slow
def test_collected_static_files_are_hashed_compressed_and_cached_for_a_year(tmp_path):
    """What `./atlas demo` and production serve: plotly.js as brotli (not its 1.5 MB)
    under a content-hashed name that browsers keep for a year."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "ATLAS_DATA_DIR": str(tmp_path), "ATLAS_STATIC_MANIFEST": "1"}
    env.pop("DATABASE_URL", None)
    repo = Path(__file__).resolve().parents[2]
    manage = [sys.executable, "manage.py"]

    def run(*args: str) -> str:
        done = subprocess.run(
            [*manage, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run("collectstatic", "--no-input", "-v0")
    out = run("shell", "-c", _MANIFEST_PROBE)
    seen = json.loads(out.strip().splitlines()[-1])
    assert re.fullmatch(
        r"/static/vendor/plotly/plotly-cartesian\.min\.[0-9a-f]{12}\.js", seen["plotly"]
    )
    assert seen["status"] == 200 and seen["encoding"] == "br"
    assert seen["bytes"] < 600_000  # 1,500,041 bytes uncompressed
    assert "immutable" in seen["cache"] and "max-age=315360000" in seen["cache"]
    assert seen["unhashed"] == 404  # only hashed copies are kept
