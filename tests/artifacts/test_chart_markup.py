"""Issue 19.8: a Chrome trace's step names reach the artifact chart, and plotly.js renders
a subset of HTML in what it draws, links included. A step named with an ``<a href>`` was a
clickable "Session expired: sign in again" link on the artifact page.

The trace here is parsed and analysed by the real code (``load_chrome_trace``,
``analyse_trace``, the worker task), and the page is opened in real Chromium, the only
honest judge of what plotly.js draws."""

from __future__ import annotations

import io
import json

import pytest
from django.test import Client
from django.urls import reverse

from artifacts import actions as artifact_actions
from artifacts.charts import figure_json
from artifacts.chrome_trace import load_chrome_trace
from artifacts.models import Artifact, Source
from artifacts.tasks import analyse_artifact
from artifacts.trace_analysis import analyse_trace
from investigations import actions
from tests.browser.conftest import chromium  # noqa: F401 (fixture)
from tests.support import builders

LINK = '<a href="https://evil.example/login">Session expired: sign in again</a>'


def _hostile_trace(steps: int = 6) -> bytes:
    """An SGLang-style trace whose step annotations carry a link (the name pattern allows
    anything but "]" after the mode, so the annotations become the chart's steps)."""
    events: list[dict] = []
    for i in range(steps):
        ts = 1_000.0 + i * 10_000.0
        events.append(
            {
                "ph": "X", "cat": "user_annotation", "name": f"step[DECODE {LINK} #{i}]",
                "ts": ts, "dur": 8_000.0, "pid": 1, "tid": 1,
            }
        )  # fmt: skip
        events.append(
            {
                "ph": "X", "cat": "kernel", "name": f"gemm {LINK}", "ts": ts + 100.0,
                "dur": 5_000.0, "pid": 0, "tid": 7, "args": {"device": 0, "stream": 7},
            }
        )  # fmt: skip
    return json.dumps({"traceEvents": events}).encode()


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k != "hovertemplate" for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_step_names_from_a_real_trace_reach_the_chart_without_markup() -> None:
    analysis = analyse_trace(load_chrome_trace(io.BytesIO(_hostile_trace()))).as_dict()
    names = [s["name"] for s in analysis["steps"]]
    assert len(names) == 6 and all("<a href" in n for n in names)  # the attack is in the data
    chart = figure_json({"kind": "chrome-trace", **analysis})
    assert chart is not None
    shown = _strings(chart["figure"])
    assert any("Session expired: sign in again" in s for s in shown)  # still reads as evidence
    assert not any("<" in s or ">" in s for s in shown), [s for s in shown if "<" in s][:3]
    # The code's own hover template keeps plotly's tag.
    assert chart["figure"]["data"][0]["hovertemplate"].endswith("<extra></extra>")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_trace_step_name_is_no_link_on_the_artifact_page(
    chromium,  # noqa: F811
    live_server,
    settings,
    tmp_path,
    team,
    commander,
):
    settings.MEDIA_ROOT = tmp_path / "media"
    deployment = builders.deployment(team)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=commander
    )
    row = artifact_actions.store(
        deployment=deployment,
        investigation=investigation,
        chunks=[_hostile_trace()],
        name="trace.json",
        source=Source.UPLOAD,
        user=commander,
    )
    analyse_artifact.apply(args=[str(row.pk)])
    row = Artifact.objects.get(pk=row.pk)
    assert row.status == "done", row.reason
    client = Client()
    client.force_login(commander)
    # Its own context, not tests.browser's ``page``: the page's CSP (plotly's colour bar
    # included) is tests/browser/test_artifact_page.py's subject, not this test's.
    context = chromium.new_context(base_url=live_server.url)
    page = context.new_page()
    context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )
    response = page.goto(live_server.url + reverse("artifacts:detail", args=[row.pk]))
    assert response is not None and response.status == 200
    page.wait_for_selector("#artifact-chart .main-svg")
    chart_text = page.inner_text("#artifact-chart")
    links = page.evaluate(
        "() => [...document.querySelectorAll('#artifact-chart a')].map(a => a.outerHTML)"
    )
    context.close()
    assert "Session expired: sign in again" in chart_text  # the name is drawn, as text
    assert links == [], links
