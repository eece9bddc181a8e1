"""The artifact page of an analysed Chrome trace, in real Chromium, under the site's CSP.

The trace is a real capture (SGLang decode on MI300, from ``shared/samples``), stored and
analysed by the real code; the ``page`` fixture fails the test on any Content-Security-
Policy refusal. Plotly's colour bar (``showscale``) was one: its bar chart drew with an
inline style the policy refused (issue 17, "no CSP violation on any page")."""

from __future__ import annotations

import pytest
from django.urls import reverse

from artifacts import actions as artifact_actions
from artifacts.models import Artifact, Source
from artifacts.tasks import analyse_artifact
from investigations import actions
from tests.browser.support import expect, log_in
from tests.support import builders
from tests.support.samples import CHROME_TRACES, samples_absent

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SAMPLE = CHROME_TRACES / "tracelens_mi300_sglang_qwen3-8b_decode.json.gz"


def test_an_analysed_chrome_trace_draws_its_chart_without_a_csp_refusal(
    page, commander, team, settings, tmp_path, live_server, requests_seen
):
    if samples_absent(SAMPLE):
        pytest.skip(f"{SAMPLE} is not here")
    settings.MEDIA_ROOT = tmp_path / "media"
    deployment = builders.deployment(team)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=commander
    )
    row = artifact_actions.store(
        deployment=deployment,
        investigation=investigation,
        chunks=[SAMPLE.read_bytes()],
        name=SAMPLE.name,
        source=Source.UPLOAD,
        user=commander,
    )
    analyse_artifact.apply(args=[str(row.pk)])
    row = Artifact.objects.get(pk=row.pk)
    assert (row.status, row.kind) == ("done", "chrome-trace"), row.reason
    assert row.analysis and row.analysis["steps"]

    log_in(page, commander)
    page.goto(reverse("artifacts:detail", args=[row.pk]))
    expect()(page.get_by_role("heading", name="Engine steps", exact=False)).to_be_visible()
    page.wait_for_selector("#artifact-chart .main-svg")
    # The colour bar is drawn (the colour means new prefill tokens) and so are the bars.
    expect()(page.locator("#artifact-chart .colorbar")).to_have_count(1)
    assert page.locator("#artifact-chart .bars .point").count() == len(row.analysis["steps"])
    assert requests_seen.outside(live_server.url) == []
    # The fixture's teardown asserts that Chromium refused nothing.
