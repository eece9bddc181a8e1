"""Hostile text everywhere a person or a probe can put it, rendered in real headless
Chromium: nothing executes, and the payload reads as the text it is.

Sources: the deployment and team names, a member's user name, the Alertmanager webhook
(summary -> title, alert name), decision reasons, the fix note, the close override, every
postmortem narrative section, an action item, a review comment, Prometheus label values
(engine and dcgm-exporter) and engine log lines served by a real hostile HTTP server and
polled into observations, Chrome-trace kernel/op names and memory-snapshot frame names
from real captures rewritten with payloads, uploaded and analysed. Each page that shows
them is opened in Chromium, which is the only honest judge of what executes; so is the
Markdown export (opened as HTML, like a viewer that passes raw HTML through) and the HTML
the PDF is printed from.
"""

from __future__ import annotations

import gzip
import json
import pickle
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from artifacts import actions as artifact_actions
from artifacts import safepickle
from artifacts.models import Artifact, Source
from artifacts.tasks import analyse_artifact
from investigations import actions, live
from investigations.evidence import frozen_evidence
from investigations.models import Investigation
from investigations.tasks import poll_and_evaluate
from investigations.tokens import create_token
from postmortems import actions as pm_actions
from postmortems import tasks as pm_tasks
from postmortems.models import SECTIONS, ActionItem, Export
from probes.models import Target, TargetKind
from teams.models import Membership, Role, Team
from tests.browser.conftest import chromium, page, requests_seen  # noqa: F401 (fixtures)
from tests.support import builders
from tests.support.hostile import _Handler, hostile_server
from tests.support.samples import CHROME_TRACES, MEMORY_SNAPSHOTS
from tests.support.verification import verification_as
from tests.trust.conftest import need_samples

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

IMG = "<img src=x onerror=window.__xss=1>"
SVG = '"><svg onload=window.__xss=2>'
SCRIPT = "</script><script>window.__xss=3</script>"
ATTR = "' onmouseover='window.__xss=4' autofocus onfocus='window.__xss=4' x='"
JSON_BREAK = '"};window.__xss=5;//'
JS_URL = "javascript:window.__xss=6//"
ALL = " ".join([IMG, SVG, SCRIPT, ATTR, JSON_BREAK, JS_URL])
SHORT = IMG  # for fields of 100 characters or fewer
MARK = "window.__xss="  # every payload carries it; seen as text, it was not executed

# Where each payload came from, so the test proves each source reached a rendered page.
# Not in the list, because no page renders them today (they are stored, and the JSON API
# returns them): the engine's model_name label ("t-label"), Chrome-trace event names
# ("t-trace") and snapshot frame names ("t-frame"). They are sent anyway, so a page that
# starts showing them is covered by the execution checks at once.
TAGS = (
    "t-summary", "t-eliminate", "t-confirm", "t-fixnote", "t-override", "t-narrative",
    "t-actionitem", "t-comment", "t-host", "t-log",
)  # fmt: skip
CAUSE = "oversized-prefill-chunks"
DECOY = "gpu-throttling"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _HostileEngine(_Handler):
    """An engine and a dcgm-exporter whose label values, and a log whose lines, are XSS."""

    def _send(self, body: bytes) -> None:
        self._head("200 OK", {"Content-Type": "text/plain; version=0.0.4"}, len(body))
        self.wfile.write(body)

    def do_metrics(self, path: str) -> None:
        labels = f'engine="0",model_name="{_label("t-label " + ALL)}"'
        self._send(
            (
                "# TYPE vllm:num_requests_waiting gauge\n"
                f"vllm:num_requests_waiting{{{labels}}} 47\n"
                "# TYPE vllm:num_requests_running gauge\n"
                f"vllm:num_requests_running{{{labels}}} 12\n"
                "# TYPE vllm:kv_cache_usage_perc gauge\n"
                f"vllm:kv_cache_usage_perc{{{labels}}} 0.94\n"
            ).encode()
        )

    def do_dcgm(self, path: str) -> None:
        labels = (
            f'gpu="0",UUID="GPU-1",Hostname="{_label("t-host " + ALL)}",modelName="{_label(SVG)}"'
        )
        self._send(
            (
                "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 55\n"
                "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
                f"DCGM_FI_DEV_SM_CLOCK{{{labels}}} 1410\n"
            ).encode()
        )

    def do_log(self, path: str) -> None:
        lines = [
            f"INFO 02-12 19:50:09 [gpu_worker.py:1] CUDA out of memory. t-log {ALL}",
            f"ERROR 02-12 19:50:10 [core.py:2] EngineCore encountered a fatal error {ALL}",
            f"INFO 02-12 19:50:11 [api_server.py:3] Starting vLLM API server {ALL}",
        ]
        self._send(("\n".join(lines) + "\n").encode())


class World:
    """Every row the pages read, with hostile text in each free-text field."""

    def __init__(self, engine_url: str) -> None:
        self.team = Team.objects.create(name=f"Serving {SHORT}")
        from django.contrib.auth import get_user_model

        users = get_user_model()
        self.commander = users.objects.create_user(username="cmdr", password="x" * 20)
        Membership.objects.create(team=self.team, user=self.commander, role=Role.COMMANDER)
        self.hostile_user = users.objects.create_user(username=IMG, password="x" * 20)
        Membership.objects.create(team=self.team, user=self.hostile_user, role=Role.RESPONDER)
        self.deployment = builders.deployment(self.team, f"prod {SHORT}"[:100])
        for kind, path in ((TargetKind.ENGINE, "/metrics"), (TargetKind.DCGM, "/dcgm")):
            Target.objects.create(deployment=self.deployment, kind=kind, url=engine_url + path)
        Target.objects.create(
            deployment=self.deployment,
            kind=TargetKind.LOG_HTTP,
            url=engine_url + "/log",
            replica=SHORT,
        )

    def alert(self) -> Investigation:
        token = create_token(team=self.team, name=SHORT, user=self.commander)[1]
        payload = {
            "status": "firing",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {
                        "alertname": f"Atlas {SHORT}",
                        "atlas_symptom": "itl-spikes",
                        "atlas_deployment": self.deployment.name,
                    },
                    "annotations": {"summary": f"t-summary {ALL}", "description": ALL},
                    "fingerprint": "xss-1",
                }
            ],
        }
        response = Client().post(
            reverse("api:alertmanager"),
            data=json.dumps(payload),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        assert response.status_code == 200, response.content
        (opened,) = response.json()["opened"]
        return Investigation.objects.get(pk=opened)

    def decide_fix_close(self, investigation: Investigation) -> None:
        result = live.current_state(investigation).result
        for key, action in ((DECOY, "eliminate"), (CAUSE, "confirm")):
            actions.decide(
                investigation=investigation,
                node=key,
                action=action,
                reason=f"t-{action} {ALL}",
                user=self.commander,
                evidence=frozen_evidence(result.find(key)),
            )
        from investigations.playbook import get_playbook

        fix = get_playbook("itl-spikes").node(CAUSE).fix
        parameters = dict.fromkeys([*fix.parameters, *fix.apply], 2048.0)
        actions.record_fix(
            investigation=investigation,
            node=CAUSE,
            parameters=parameters,
            user=self.commander,
            note=f"t-fixnote {ALL}",
        )
        with verification_as("failing"):  # the override is shown only without a pass
            actions.close_investigation(
                investigation=investigation,
                user=self.commander,
                override=f"t-override {ALL}",
            )

    def postmortem(self, investigation: Investigation) -> Export:
        pm_actions.save_narrative(
            investigation=investigation,
            sections={key: f"t-{key} {ALL}\n\n# {ALL}\n[x]({JS_URL})" for key in SECTIONS},
            base_version=0,
            user=self.commander,
            comment=ALL,
        )
        pm_actions.add_action_item(
            investigation=investigation,
            title=f"t-actionitem {ALL}",
            type=ActionItem.Type.MITIGATE,
            user=self.commander,
            owner_text=SHORT,
        )
        from review.actions import add_comment

        add_comment(investigation=investigation, user=self.hostile_user, body=f"t-comment {ALL}")
        export = pm_actions.request_export(
            investigation=investigation, format=Export.Format.MARKDOWN, user=self.commander
        )
        pm_tasks.export_postmortem(str(export.pk))
        export.refresh_from_db()
        return export

    def artifacts(self, investigation: Investigation) -> list[Artifact]:
        trace_path = CHROME_TRACES / "hta_triton_example.json.gz"
        snapshot_path = MEMORY_SNAPSHOTS / "mlsys_profile_no_grad.pkl"
        need_samples([trace_path, snapshot_path])
        doc = json.loads(gzip.decompress(trace_path.read_bytes()))
        for i, event in enumerate(doc["traceEvents"]):
            if isinstance(event, dict) and "name" in event and event.get("ph") == "X":
                event["name"] = f"t-trace {ALL} #{i} {event['name']}"
        snapshot = safepickle.loads(snapshot_path.read_bytes())
        _rename_frames(snapshot)
        rows = []
        for name, blob in (
            (f"{SHORT}.json", json.dumps(doc).encode()),
            (f"{SHORT}.pickle", pickle.dumps(snapshot, protocol=4)),
        ):
            rows.append(
                artifact_actions.store(
                    deployment=self.deployment,
                    investigation=investigation,
                    chunks=[blob],
                    name=name,
                    source=Source.UPLOAD,
                    user=self.commander,
                )
            )
        for row in rows:
            analyse_artifact.apply(args=[str(row.pk)])
            row.refresh_from_db()
        return rows


def _rename_frames(node) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("name", "filename") and isinstance(value, str):
                node[key] = f"t-frame {ALL} {value}"
            else:
                _rename_frames(value)
    elif isinstance(node, list):
        for item in node:
            _rename_frames(item)


# Everything on a page that could run: event-handler attributes, javascript: URLs,
# script elements whose text came from a payload.
INJECTED = """() => {
  const found = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      const bad = /^on/i.test(a.name) || /^\\s*javascript:/i.test(a.value);
      if (bad) found.push(el.tagName + ' ' + a.name);
    }
    if (el.tagName === 'SCRIPT' && el.textContent.includes('__xss')) {
      if (!el.type || !/json/i.test(el.type)) found.push('SCRIPT ' + el.textContent.slice(0, 80));
    }
    if (el.tagName === 'IMG' && el.getAttribute('src') === 'x') found.push('IMG src=x');
    if (el.tagName === 'svg' && el.outerHTML.includes('__xss')) found.push('SVG');
  }
  return found;
}"""


def _check(tab, url: str, *, shows_payload: bool = True) -> str:
    dialogs: list[str] = []
    tab.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    response = tab.goto(url)
    assert response is not None and response.status == 200, (url, response and response.status)
    tab.wait_for_load_state("networkidle")
    # Give handlers every chance: hover and focus each element (onmouseover, onfocus).
    tab.evaluate(
        "() => { for (const el of document.querySelectorAll('body *')) {"
        " el.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));"
        " if (el.focus) el.focus(); } }"
    )
    tab.wait_for_timeout(50)
    assert tab.evaluate("() => window.__xss") is None, url
    assert tab.evaluate(INJECTED) == [], url
    assert dialogs == [], url
    text = tab.inner_text("body")
    if shows_payload:
        assert MARK in text, f"{url}: the payload is not shown as text"
    return text + tab.content()  # text, and the parsed DOM (JSON script contexts included)


def test_hostile_text_never_executes_in_any_page(page, live_server, chromium, settings, tmp_path):  # noqa: F811
    settings.MEDIA_ROOT = tmp_path / "media"
    with hostile_server(_HostileEngine) as engine_url:
        world = World(engine_url)
        investigation = world.alert()
        beat = ThreadPoolExecutor(max_workers=1, thread_name_prefix="beat")
        try:
            for back in (30, 15, 0):
                cycle = timezone.now() - timedelta(seconds=back)
                beat.submit(
                    poll_and_evaluate.apply, args=[str(world.deployment.pk), cycle.isoformat()]
                ).result()
            trace, snapshot = beat.submit(world.artifacts, investigation).result()
        finally:
            beat.submit(connections.close_all).result()  # the thread's own connection
            beat.shutdown()
    assert trace.status == "done" and snapshot.status == "done", (trace.reason, snapshot.reason)
    assert (
        Target.objects.filter(deployment=world.deployment, last_success_at__isnull=False).count()
        == 3
    )
    world.decide_fix_close(investigation)
    export = world.postmortem(investigation)
    assert export.status == Export.Status.DONE, export

    client = Client()
    client.force_login(world.commander)
    page.context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    inv, dep, team = investigation.pk, world.deployment.pk, world.team.pk
    pages = [
        (reverse("home"), True),
        (reverse("teams:detail", args=[team]), True),
        (reverse("investigations:deployment", args=[dep]), True),
        (reverse("investigations:deployment_targets", args=[dep]), True),
        (reverse("investigations:detail", args=[inv]), True),
        (reverse("investigations:tree", args=[inv]), False),
        (reverse("investigations:evidence", args=[inv]), False),
        (reverse("artifacts:list", args=[inv]), True),
        (reverse("artifacts:detail", args=[trace.pk]), True),
        (reverse("artifacts:detail", args=[snapshot.pk]), True),
        (reverse("postmortems:detail", args=[inv]), True),
        (reverse("postmortems:exports", args=[inv]), False),
        (reverse("review:list"), False),
        (reverse("review:detail", args=[inv]), True),
        (reverse("investigations:audit", args=[inv]), True),
        (reverse("teams:audit", args=[team]), True),
        (reverse("api:tokens", args=[team]), True),
    ]
    # The detector itself works in this browser: the same payload, unescaped, does run.
    page.set_content(f"<div>{IMG}</div>")
    page.wait_for_function("() => window.__xss === 1")
    seen = "".join(_check(page, live_server.url + path, shows_payload=s) for path, s in pages)
    shown = {tag for tag in TAGS if tag in seen}
    assert shown == set(TAGS), f"never rendered, so not tested: {set(TAGS) - shown}"

    # Every product page above rendered under its CSP without a refusal; what follows is
    # the test's own set_content() of exported HTML (with its inline print stylesheet) under
    # the last page's policy, whose refusals are the policy working, not a page's fault.
    assert page.csp_refused == [], page.csp_refused
    page.csp_refused.clear()
    # The Markdown export opened as HTML: the worst Markdown viewer passes HTML through.
    with export.file.open("rb") as fh:
        markdown = fh.read().decode()
    assert "<img" not in markdown and "<script" not in markdown and "<svg" not in markdown
    page.set_content(markdown)
    assert page.evaluate("() => window.__xss") is None
    assert page.evaluate(INJECTED) == []

    # The HTML the PDF is printed from, with scripts enabled (the printer runs none).
    from postmortems.record import load_document
    from tests.postmortems.conftest import need_weasyprint

    render_html = need_weasyprint().render_html

    page.set_content(render_html(load_document(investigation, investigation_url="/")))
    assert page.evaluate("() => window.__xss") is None
    assert page.evaluate(INJECTED) == []
    assert MARK in page.inner_text("body")
    page.csp_refused.clear()  # the print HTML's own inline stylesheet, refused as it should be
