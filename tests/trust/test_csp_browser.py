"""The main pages under the Content-Security-Policy in real headless Chromium: not one
violation (scripts, styles, htmx, plotly), and htmx requests carry the CSRF token.

Violations are caught twice: the ``securitypolicyviolation`` DOM event (recorded by a
script the browser injects before any page script, which the policy cannot block) and
Chromium's console message for each refusal.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from artifacts.models import Artifact
from investigations import actions
from investigations.models import Investigation
from postmortems.models import Export, Postmortem
from probes.models import TargetKind
from tests.browser.conftest import chromium, page, requests_seen  # noqa: F401 - fixtures
from tests.browser.support import draw_every_chart
from tests.conftest import PASSWORD
from tests.support import builders

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " +
                              (e.sourceFile || "") + ":" + e.lineNumber);
});
"""


@pytest.fixture
def incident(team, commander, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    deployment = builders.deployment(team)
    builders.target(deployment, TargetKind.ENGINE, "http://127.0.0.1:9/metrics")
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )
    artifact = Artifact.objects.create(
        team=team,
        deployment=deployment,
        investigation=investigation,
        name="rank0_snapshot.pickle",
        kind="memory-snapshot",
        file="artifacts/none.pickle",
        size_bytes=10,
        sha256="0" * 64,
        source="upload",
        status="done",
        captured_at=timezone.now(),
        analysis={
            "kind": "memory-snapshot",
            "findings": [],
            "timeline": {
                "0": {"x": [0, 1, 2, 3], "reserved": [1e9, 2e9, 2e9, 3e9], "allocated": [1e9] * 4}
            },
        },
    )
    Postmortem.objects.create(team=team, investigation=investigation)
    return {"deployment": deployment, "investigation": investigation, "artifact": artifact}


def _pages(team, incident) -> list[str]:
    investigation = incident["investigation"].pk
    return [
        reverse("home"),
        reverse("teams:list"),
        reverse("teams:detail", args=[team.pk]),
        reverse("api:tokens", args=[team.pk]),
        reverse("teams:audit", args=[team.pk]),
        reverse("investigations:deployment", args=[incident["deployment"].pk]),
        reverse("investigations:detail", args=[investigation]),
        reverse("investigations:audit", args=[investigation]),
        reverse("artifacts:detail", args=[incident["artifact"].pk]),
        reverse("postmortems:detail", args=[investigation]),
        reverse("password_change"),
    ]


def test_main_pages_raise_no_csp_violation(page, live_server, team, commander, incident):  # noqa: F811
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.context.add_init_script(RECORD_VIOLATIONS)

    page.goto(reverse("login"))
    page.fill("#id_username", commander.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("home"))

    seen = {}
    for path in _pages(team, incident):
        response = page.goto(path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
        seen[path] = page.evaluate("window.__cspViolations")
    chart = page.goto(reverse("artifacts:detail", args=[incident["artifact"].pk]))
    assert chart.status == 200
    page.wait_for_selector("#artifact-chart .main-svg")  # plotly drew under the policy

    assert {path: v for path, v in seen.items() if v} == {}
    assert [line for line in console if "Content Security Policy" in line] == []


def test_the_statistics_trends_draw_under_the_policy(page, live_server, team, commander, incident):  # noqa: F811
    """The statistics page's weekly trends are plotly figures drawn by the site's scripts."""
    Investigation.objects.filter(pk=incident["investigation"].pk).update(
        status="closed", closed_at=timezone.now(), severity="sev2"
    )
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.context.add_init_script(RECORD_VIOLATIONS)
    page.goto(reverse("login"))
    page.fill("#id_username", commander.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("home"))
    response = page.goto(reverse("review:stats") + f"?team={team.pk}")
    assert response.status == 200
    assert draw_every_chart(page) == 3  # weekly trends by severity, by cause, durations
    for chart in ("stats-severity", "stats-cause", "stats-durations"):
        page.wait_for_selector(f"#{chart} .main-svg")
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__cspViolations") == []
    assert [line for line in console if "Content Security Policy" in line] == []


def test_htmx_posts_carry_the_csrf_token(page, live_server, team, commander, incident):  # noqa: F811
    """The export button posts through htmx; the request carries ``X-CSRFToken`` from the
    body's hx-headers, and a POST with only that header (no form field) is accepted."""
    page.context.add_init_script(RECORD_VIOLATIONS)
    page.goto(reverse("login"))
    page.fill("#id_username", commander.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("home"))

    investigation = incident["investigation"]
    page.goto(reverse("postmortems:detail", args=[investigation.pk]))
    cookie = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    with page.expect_request(lambda r: r.url.endswith("/exports/new/")) as posted:
        page.click("button[name=format][value=markdown]")
    request = posted.value
    assert request.headers.get("hx-request") == "true"
    # Django masks the token per page: same secret as the cookie, different text.
    assert len(request.headers.get("x-csrftoken", "")) == 64
    assert cookie
    assert request.response().status == 200

    url = reverse("postmortems:export", args=[investigation.pk])
    status = page.evaluate(
        """url => new Promise(resolve => {
             document.body.addEventListener("htmx:afterRequest",
               e => resolve(e.detail.xhr.status), {once: true});
             htmx.ajax("POST", url, {target: "#export-status", swap: "outerHTML",
                                     values: {format: "pdf"}});
           })""",
        url,
    )
    assert status == 200
    assert Export.objects.filter(postmortem__investigation=investigation).count() == 2
    assert page.evaluate("window.__cspViolations") == []
