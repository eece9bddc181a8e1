"""docs/api.md cannot drift: every ``bash`` block in it runs, as written, with the real
``curl`` binary against a live server (pytest-django's ``live_server``) and a real token,
and must answer the status its first line states (``# answers 201``).

The blocks run in the page's order, with the variables the page tells readers to set
(``ATLAS_URL``, ``ATLAS_TOKEN``, ``INVESTIGATION``, ``ARTIFACT``). Each block is run
exactly as written. The only addition is a ``curl`` shell function put in front of it,
which calls the real binary with ``-sS -o <file> -w '%{http_code}'`` so the status and
body can be read back. Every API URL the project routes must be the target of at least
one block. The page's alert-name table and symptom lists must match the code.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from celery import current_app
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from artifacts import actions as artifact_actions
from artifacts.models import Source
from enginesim.artifacts import GcPause, gc_pause_lines
from investigations import actions
from investigations.api import ALERT_SYMPTOMS
from investigations.models import Investigation, TimelineEvent
from investigations.playbook import playbooks
from investigations.tokens import create_token

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)
ANSWERS = re.compile(r"\A# answers (\d{3})\b")
TARGET = re.compile(r'"\$ATLAS_URL(/[^"]*)"')
WRAPPER = """curl() { command curl -sS -o "$ATLAS_BODY" -w '%{http_code}' "$@"; }\n"""

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl binary")


def blocks(text: str) -> list[tuple[int, str]]:
    """Each ``bash`` block of the page with the status its first line states."""
    found = []
    for match in BLOCK.finditer(text):
        body = match.group(1)
        stated = ANSWERS.match(body)
        assert stated, f"a bash block in docs/api.md does not state its status:\n{body}"
        found.append((int(stated.group(1)), body))
    return found


def api_routes() -> set[str]:
    """The view name of every URL under ``api/`` the project routes."""
    names: set[str] = set()

    def walk(patterns, prefix: str, namespace: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                ns = f"{namespace}{p.namespace}:" if p.namespace else namespace
                walk(p.url_patterns, prefix + str(p.pattern), ns)
            elif isinstance(p, URLPattern) and (prefix + str(p.pattern)).startswith("api/"):
                names.add(f"{namespace}{p.name}")

    walk(get_resolver().url_patterns, "", "")
    return names


@pytest.fixture
def world(transactional_db, team, commander, tmp_path, settings):
    settings.MEDIA_ROOT = tmp_path / "media"
    from tests.support import builders

    deployment = builders.deployment(team, "atlas-prod")
    token = create_token(team=team, name="docs", user=commander)[1]
    investigation = actions.open_investigation(
        deployment=deployment, symptom="itl-spikes", user=commander
    )
    log = "\n".join(gc_pause_lines(GcPause(12.5, 2, 0.1234, 4120, 3), python_version="3.11"))
    (tmp_path / "gc.log").write_text(log + "\n")
    artifact = artifact_actions.store(
        deployment=deployment,
        investigation=investigation,
        chunks=[log.encode()],
        name="gc.log",
        source=Source.API,
    )
    return {"token": token, "investigation": investigation, "artifact": artifact, "cwd": tmp_path}


def test_every_curl_in_the_api_docs_answers_what_the_page_says(live_server, world):
    eager = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True  # an upload's analysis runs, no broker queue
    try:
        ran = _run_blocks(live_server.url, world)
    finally:
        current_app.conf.task_always_eager = eager
    missing = api_routes() - ran
    assert not missing, f"API endpoints with no curl example in docs/api.md: {sorted(missing)}"
    # What the examples did is what the page says they do.
    investigation = world["investigation"]
    assert investigation.decisions.get().node == "gc-pauses"
    assert investigation.artifacts.count() == 3  # the stored one and two uploads
    alerted = Investigation.objects.get(alert_fingerprint="f3a1c0ffee")
    assert [e.data["status"] for e in TimelineEvent.objects.filter(kind="alert")] == ["resolved"]
    assert TimelineEvent.objects.get(kind="alert").investigation_id == alerted.pk


def _run_blocks(base_url: str, world) -> set[str]:
    env = {
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "ATLAS_URL": base_url,
        "ATLAS_TOKEN": world["token"],
        "INVESTIGATION": str(world["investigation"].pk),
        "ARTIFACT": str(world["artifact"].pk),
        "ATLAS_BODY": str(world["cwd"] / "body.json"),
    }
    ran: set[str] = set()
    found = blocks(DOC.read_text())
    assert len(found) >= 10
    for stated, body in found:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", WRAPPER + body],
            cwd=world["cwd"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"{body}\n{result.stderr}"
        answer = Path(env["ATLAS_BODY"]).read_text()
        assert int(result.stdout) == stated, f"{body}\nanswered {result.stdout}: {answer}"
        assert json.loads(answer) is not None  # every answer under /api/ is JSON
        if stated < 400:
            assert "error" not in json.loads(answer), answer
        for target in TARGET.findall(body):
            path = urlsplit(target.replace("$INVESTIGATION", env["INVESTIGATION"]).replace(
                "$ARTIFACT", env["ARTIFACT"]
            )).path  # fmt: skip
            if not path.endswith("/"):
                ran.add(resolve(path).view_name)
    return ran


def test_the_alert_name_table_is_the_code_s_mapping():
    table = dict(re.findall(r"^\| `(Atlas\w+)` \| `([\w-]+)` \|$", DOC.read_text(), re.MULTILINE))
    assert table == ALERT_SYMPTOMS


def test_the_symptoms_the_page_lists_are_the_playbooks():
    text = DOC.read_text()
    listed = re.findall(r"one of\s+((?:`[\w-]+`,?\s*(?:or\s+)?)+)", text)
    assert len(listed) >= 2
    for names in listed:
        assert set(re.findall(r"`([\w-]+)`", names)) == set(playbooks())
