"""A whole incident walked in real headless Chromium, as a person would.

The scenario is ``long-prefill-itl`` (walkthrough 3): priority requests with 4k-10k-token
prompts are prefilled in one 8,192-token chunk and p99 inter-token latency spikes. The
commander logs in, opens an ``itl-spikes`` investigation from the deployment page, watches
the tree fill in without a page reload while the probes poll, eliminates a decoy by
keyboard alone, confirms the true cause, records the fix (applied in the simulator through
``/control/fix``), sees the verification pass, closes the investigation and exports the
postmortem as PDF, which is read back with ``pdftotext``.

Time and polling: there is no Celery worker or beat. The test is the beat: each cycle
advances the manual-clock simulator 15 s, moves the virtual wall clock (``clock``, read
through ``django.utils.timezone.now`` by the live server too) on by the same 15 s and
calls ``investigations.tasks.poll_and_evaluate.apply`` with that cycle time. The clock starts 40
minutes in the past, so the ten-minute verification window takes a few seconds.
The PDF export is rendered by calling the export task the way a worker would once the
page's request has queued the row; the page's own htmx polling shows it finish.

Screenshots (investigation mid-incident, after the decisions, verification passing, the
postmortem) are written under the test's tmp path; with ``ATLAS_SCREENSHOTS=1`` they are
also copied to ``var/screenshots/`` in the repository, e.g.

    ATLAS_SCREENSHOTS=1 .venv/bin/pytest tests/browser -q
"""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import timedelta

import pytest

from enginesim.config import FIX_FIELDS
from investigations import live
from investigations.models import Decision, Investigation, TimelineEvent
from postmortems import tasks as postmortem_tasks
from postmortems.models import Export
from tests.browser import support
from tests.browser.support import CYCLE_S, Beat, await_tree_refresh, draw_every_chart, section
from tests.conftest import PASSWORD, require_service
from tests.support import builders

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CAUSE = "oversized-prefill-chunks"
CAUSE_TITLE = "Steps carry prefill chunks larger than the chunk budget"
DECOY = "gpu-throttling"
DECOY_TITLE = "GPUs run below their full clock (thermal or power limits)"
ELIMINATE_REASON = "SM clocks are at the full 1,410 MHz on every rank; nothing is throttled"
CONFIRM_REASON = "Tokens per step p99 is far over the 512-token chunk budget"
ALERT = "AtlasOversizedPrefillChunks"


class Worker:
    """Stands in for the export task's queue: the page's request queues the row and, on
    commit, ``delay``s its id here; the test renders it with the real task when it chooses,
    as a worker would."""

    task = postmortem_tasks.export_postmortem

    def __init__(self) -> None:
        self.queued: list[str] = []

    def delay(self, export_id: str) -> None:
        self.queued.append(export_id)


@pytest.fixture
def deployment(make_deployment, simulator):
    deployment = make_deployment("atlas-sim", model_name="atlas-140b")
    # The engine log too: a V1 engine says its chunk budget only there.
    builders.targets(deployment, simulator.base, ("engine", "dcgm", "log_http"))
    return deployment


@pytest.fixture
def beat(simulator, clock, deployment):
    beat = Beat(simulator, clock, deployment)
    try:
        yield beat
    finally:
        beat.stop()


def _node(page, key: str):
    return page.get_by_test_id(f"node-{key}")


def _tab_to(page, predicate: str, limit: int = 120) -> int:
    """Press Tab until ``predicate`` (JS over document.activeElement) holds."""
    for presses in range(1, limit + 1):
        page.keyboard.press("Tab")
        if page.evaluate(f"(el => {predicate})(document.activeElement)"):
            return presses
    raise AssertionError(f"Tab never reached {predicate!r} in {limit} presses")


def _pdf_text(path) -> str:
    out = subprocess.run(
        ["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True, text=True
    ).stdout
    return " ".join(out.split())


def test_a_whole_incident_in_the_browser(
    page,
    live_server,
    requests_seen,
    screenshots,
    clock,
    simulator,
    beat,
    commander,
    settings,
    tmp_path,
    monkeypatch,
):
    if not shutil.which("pdftotext"):
        require_service("poppler-utils", "pdftotext is not installed")
    expect = support.expect()
    settings.MEDIA_ROOT = tmp_path / "media"
    worker = Worker()
    monkeypatch.setattr(postmortem_tasks, "export_postmortem", worker)
    # The incident has been under way for two minutes when someone looks.
    simulator.advance(120)
    clock.advance(120)

    # 1. Log in through the form.
    page.goto("/")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    page.get_by_label("Username").fill(commander.get_username())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Active investigations", exact=True)).to_be_visible()

    # 2. The deployment page; open an investigation from a symptom.
    page.get_by_role("link", name="atlas-sim").click()
    expect(page.get_by_role("heading", name=re.compile("^atlas-sim"))).to_be_visible()
    page.get_by_label("Symptom").select_option(label="p99 inter-token latency over the ceiling")
    page.get_by_label("Title").fill("p99 ITL spikes on atlas-sim")
    page.get_by_role("button", name="Open investigation").click()
    expect(page.get_by_role("heading", name="p99 ITL spikes on atlas-sim")).to_be_visible()
    investigation = Investigation.objects.get()
    assert page.url == f"{live_server.url}/investigations/{investigation.pk}/"
    alarm = section(page, "Alarm")
    expect(alarm).to_contain_text("no data yet")
    expect(_node(page, CAUSE).locator("summary")).to_contain_text("suggests inconclusive")

    # 3. The probes poll; the tree updates in place (htmx), with no navigation.
    page.evaluate("window.__marker = 1")
    beat.run(8)
    expect(alarm.get_by_text("firing", exact=True)).to_be_visible(timeout=20_000)
    expect(_node(page, CAUSE).locator("summary")).to_contain_text("suggests confirm")
    expect(_node(page, DECOY).locator("summary")).to_contain_text("suggests eliminate")
    assert page.evaluate("window.__marker") == 1, "the page reloaded instead of swapping"
    assert page.url.endswith(f"/investigations/{investigation.pk}/")
    screenshots.take(page, "investigation-mid-incident")

    # A reason being typed, and a collapsed branch someone opened, survive the refresh of
    # every cycle (hx-preserve on the reason; tree.js remembers open branches).
    decoy = _node(page, DECOY)
    decoy.locator("summary").click()
    decoy.get_by_label(re.compile("^Reason for")).first.fill("half-typed reason")
    await_tree_refresh(page)
    assert decoy.get_by_label(re.compile("^Reason for")).first.input_value() == (
        "half-typed reason"
    )
    assert decoy.evaluate("el => el.open"), "an opened branch closed on refresh"
    decoy.get_by_label(re.compile("^Reason for")).first.fill("")
    decoy.locator("summary").click()  # closed again, for the keyboard walk below
    # Enter in a reason adds a line; it never submits (it used to confirm).
    assert (
        decoy.get_by_label(re.compile("^Reason for")).first.evaluate("el => el.tagName")
        == "TEXTAREA"
    )

    # 4a. Eliminate the decoy by keyboard alone: Tab to its (collapsed) branch, open it,
    # type the reason, Tab to Eliminate, press Enter.
    await_tree_refresh(page)
    _tab_to(page, f"el.tagName === 'SUMMARY' && el.closest('[data-testid=node-{DECOY}]') !== null")
    page.keyboard.press("Enter")  # opens the <details>
    _tab_to(page, f"el.id === 'reason-{DECOY}'", limit=5)
    page.keyboard.type(ELIMINATE_REASON)
    _tab_to(page, "el.tagName === 'BUTTON' && el.value === 'eliminate'", limit=3)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text(f"eliminate {DECOY} recorded")

    # The evidence charts are drawn (plotly's SVG) as each comes into view, the alarm's and
    # the cause's among them, and a refresh of the tree leaves every one of them in place,
    # still drawn.
    charts = draw_every_chart(page)
    for card in ("alarm", CAUSE):
        expect(page.locator(f"#card-{card} .chart .main-svg").first).to_be_visible()
    drawn = page.evaluate(
        "(window.__charts = Array.from(document.querySelectorAll('#evidence .chart')))"
        ".filter(el => el.querySelector('.main-svg')).length"
    )
    assert drawn == charts >= 2

    # 4b. Confirm the true cause, with a reason.
    await_tree_refresh(page)
    assert (
        page.evaluate(
            "window.__charts.filter(el => el.isConnected && el.querySelector('.main-svg')).length"
        )
        == drawn
    ), "a tree refresh blanked or replaced evidence charts"
    cause = _node(page, CAUSE)
    cause.get_by_label(f"Reason for {CAUSE_TITLE}").fill(CONFIRM_REASON)
    with page.expect_navigation():
        cause.get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("status")).to_contain_text(f"confirm {CAUSE} recorded")

    # Each decision is on the timeline: when, what, why and who.
    timeline = section(page, "Timeline")
    decided = ((DECOY, "eliminate", ELIMINATE_REASON), (CAUSE, "confirm", CONFIRM_REASON))
    for node, action, reason in decided:
        decision = Decision.objects.get(investigation=investigation, node=node, action=action)
        assert decision.decided_by == commander and not decision.automatic
        event = TimelineEvent.objects.get(
            investigation=investigation, kind="decision", summary=f"{action} {node}: {reason}"
        )
        row = timeline.get_by_role("row").filter(has_text=f"{action} {node}: {reason}")
        expect(row).to_have_count(1)
        expect(row).to_contain_text(commander.get_username())  # who
        expect(row).to_contain_text(event.at.strftime("%Y-%m-%d %H:%M:%S"))  # when
    expect(_node(page, DECOY).locator("summary")).to_contain_text("eliminated")
    expect(_node(page, CAUSE).locator("summary")).to_contain_text("confirmed")
    screenshots.take(page, "after-decisions")

    # 5. Record the fix, apply it in the simulator, poll across the verification window.
    suggested = section(page, "Causes, most likely first")
    expect(suggested).to_contain_text("Suggested fix: Enforce the chunk budget unconditionally")
    page.get_by_label("Note").fill("Rolled --max-num-batched-tokens 512 with chunked prefill")
    with page.expect_navigation():
        page.get_by_role("button", name="Record fix as applied").click()
    expect(page.get_by_role("status")).to_contain_text("Fix recorded; verification has started.")
    verification = section(page, "Verification of strict-chunk-budget")
    expect(verification.locator("h2")).to_contain_text("pending")
    page.evaluate("window.__marker = 2")
    draw_every_chart(page)  # the page was reloaded: its charts are drawn when seen
    fix = live.current_state(investigation).result.find(CAUSE).fix
    simulator.post(
        "/control/fix",
        {k: FIX_FIELDS[k][0](v) for k, v in dict(fix.apply).items()},
    )
    window = investigation.fixes.get().applied_at
    beat.run(600 // CYCLE_S + 4)
    assert clock.now() - window > timedelta(seconds=600)
    expect(verification.locator("h2")).to_contain_text("passing", timeout=20_000)
    expect(verification).to_contain_text("p99 ITL under the ceiling (the alarm's own measurement)")
    expect(section(page, "Regression gate")).to_contain_text(ALERT)
    assert page.evaluate("window.__marker") == 2, "the page reloaded instead of swapping"
    expect(page.locator("#card-alarm .chart .main-svg").first).to_be_visible()  # still drawn
    screenshots.take(page, "verification-passing")

    # Close it (verification passed: no override needed).
    with page.expect_navigation():
        page.get_by_role("button", name="Close investigation").click()
    expect(page.get_by_role("status")).to_contain_text("Investigation closed.")
    expect(section(page, "Closed")).to_contain_text(CAUSE)

    # 6. The postmortem, exported as PDF and read back.
    page.get_by_role("link", name="Postmortem", exact=True).click()
    expect(
        page.get_by_role("heading", name="Postmortem: p99 ITL spikes on atlas-sim")
    ).to_be_visible()
    expect(section(page, "Root cause")).to_contain_text(CAUSE_TITLE)
    screenshots.take(page, "postmortem")
    exports = page.locator("#export-status")
    page.get_by_role("button", name="Export PDF").click()
    expect(exports).to_contain_text("Queued")
    export = Export.objects.get()
    assert worker.queued == [str(export.pk)]
    assert beat.call(lambda: worker.task.apply(args=[str(export.pk)]).get()) == "done"
    download_link = exports.get_by_role("link", name="Download")
    expect(download_link).to_be_visible(timeout=20_000)  # the page polls every 2 s
    with page.expect_download() as info:
        download_link.click()
    pdf = tmp_path / "postmortem.pdf"
    info.value.save_as(pdf)
    assert pdf.read_bytes().startswith(b"%PDF")
    text = _pdf_text(pdf)
    assert f"Root cause {CAUSE_TITLE} {CAUSE}" in text
    assert f"{DECOY_TITLE} {DECOY} eliminated" in text  # the eliminated branch ...
    assert f"by {commander.get_username()}" in text and ELIMINATE_REASON in text  # ... and why
    assert f"Alert {ALERT} (for 10m)" in text  # the regression gate's alert rule
    assert "Verification against the alarm's measurement passing" in text
    screenshots.take(page, "postmortem-exported")

    # 7. Nothing the pages asked for left the live server.
    assert requests_seen.urls
    assert requests_seen.outside(live_server.url) == []
