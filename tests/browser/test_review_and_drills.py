"""A drill and its review, walked in real headless Chromium.

A commander starts a ``kv-pressure`` drill by name on the team's drill range (a manual-clock
enginesim the console redeploys through ``/control/scenario``), sees the investigation
marked as a drill, lets the probes poll, eliminates one branch and confirms two (one of
them wrongly), finishes the drill and reads the result page, which marks each branch right
or wrong against the simulator's ground truth.

Then the review pages: a phrase from a decision reason typed during the drill finds the
drill's investigation under the "Drill" filter and not under "Real" (where a real
investigation using the same phrase is found instead, so the filter is shown to select
rather than the search to fail); a review comment is added; team statistics show their
definitions and say that drills are excluded.

As in ``test_incident_walk``, the test is the beat: ``support.Beat`` polls the range's
deployment one cycle at a time under a virtual wall clock. Screenshots: the drills list,
the drill result, the review list with results, the review detail, the team statistics.
"""

from __future__ import annotations

import re

import pytest

from atlas_console.management.commands.bootstrap_demo import register_drill_range
from drills.models import Drill
from investigations import actions
from investigations.models import Investigation
from review.models import ReviewComment
from tests.browser.support import (
    Beat,
    await_tree_refresh,
    expect,
    log_in,
    outside_origin,
    section,
)
from tests.support import builders

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCENARIO = "kv-pressure"
DRILL_TITLE = "Drill: p95 time to first token over target"
PHRASE = "router hop"
ELIMINATE_REASON = "Router hop adds 3 ms against a multi-second TTFT; requests queue in the engine"
CONFIRM_REASON = "KV-cache usage pinned near 1.0 and requests are preempted every cycle"
WRONG_REASON = "Prefill looks slow to me"
REAL_TITLE = "Slow first tokens on atlas-prod"
COMMENT = "Good drill: the router was ruled out from its own latency, not by a hunch."
# (node, action, reason, the drill result's outcome and mark)
DECISIONS = (
    ("router-latency", "eliminate", ELIMINATE_REASON, "eliminated-false", "right"),
    ("kv-cache-pressure", "confirm", CONFIRM_REASON, "confirmed-true", "right"),
    ("prefill-slow", "confirm", WRONG_REASON, "confirmed-false", "wrong"),
)


@pytest.fixture
def drill_range(team, simulator):
    return register_drill_range(team, simulator.base)


@pytest.fixture
def beat(simulator, clock, drill_range):
    beat = Beat(simulator, clock, drill_range.deployment)
    try:
        yield beat
    finally:
        beat.stop()


@pytest.fixture
def real_investigation(team, commander):
    """A real incident whose record uses the drill's phrase: the kind filter must tell them
    apart."""
    deployment = builders.deployment(team)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander, title=REAL_TITLE
    )
    actions.decide(
        investigation=investigation,
        node="router-latency",
        action="eliminate",
        reason="Router hop is flat at 3 ms on atlas-prod",
        user=commander,
        evidence={},
    )
    return investigation


def _decide(page, node: str, action: str, reason: str) -> None:
    """Open the branch if it is collapsed, type the reason, press the action's button."""
    await_tree_refresh(page)  # a whole refresh interval for what follows
    branch = page.get_by_test_id(f"node-{node}")
    if not branch.evaluate("el => el.open"):
        branch.locator(":scope > summary").click()
    form = branch.locator(":scope > form.decide")
    form.locator("textarea").fill(reason)
    with page.expect_navigation():
        form.get_by_role("button", name=action.capitalize(), exact=True).click()
    expect()(page.get_by_role("status")).to_contain_text(f"{action} {node} recorded")


@pytest.mark.parametrize("simulator", ["healthy"], indirect=True)
def test_a_drill_is_scored_then_reviewed_apart_from_real_incidents(
    page,
    live_server,
    requests_seen,
    screenshots,
    clock,
    simulator,
    drill_range,
    beat,
    team,
    commander,
    real_investigation,
):
    check = expect()

    # 1. Log in; the drills list offers the range; start a drill by the incident's name.
    log_in(page, commander)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Drills").click()
    expect()(page.get_by_role("heading", name="Drills", exact=True)).to_be_visible()
    ranges = page.get_by_test_id("drill-ranges")
    row = ranges.get_by_role("row").filter(has_text=drill_range.deployment.name)
    check(row).to_contain_text("idle")
    screenshots.take(page, "drills-list")
    row.get_by_label("Incident").select_option(SCENARIO)
    row.get_by_label("Seed (optional)").fill("11")
    with page.expect_navigation():
        row.get_by_role("button", name="Start drill").click()
    check(page.get_by_role("status")).to_contain_text("Drill started")
    drill = Drill.objects.select_related("investigation").get()
    assert drill.scenario == SCENARIO and drill.seed == 11
    assert page.url == f"{live_server.url}/investigations/{drill.investigation_id}/"
    header = page.locator("section.panel").first
    check(header.get_by_role("heading", name=DRILL_TITLE)).to_be_visible()
    check(header.locator(".badge", has_text=re.compile("^drill$"))).to_be_visible()
    assert SCENARIO not in page.content()  # the trainee is told the symptom only

    # 2. The probes poll the redeployed engine; the tree fills in without a reload.
    page.evaluate("window.__marker = 1")
    simulator.advance(300)
    clock.advance(300)
    beat.run(4)
    check(section(page, "Alarm").get_by_text("firing", exact=True)).to_be_visible(timeout=20_000)
    check(page.get_by_test_id("node-kv-cache-pressure").locator("summary")).to_contain_text(
        "suggests confirm"
    )
    assert page.evaluate("window.__marker") == 1, "the page reloaded instead of swapping"

    # 3. Decide: eliminate the router, confirm the true cause, and (wrongly) prefill.
    for node, action, reason, _, _ in DECISIONS:
        _decide(page, node, action, reason)
    state = {"eliminate": "eliminated", "confirm": "confirmed"}
    for node, action, *_ in DECISIONS:
        check(page.get_by_test_id(f"node-{node}").locator(":scope > summary")).to_contain_text(
            state[action]
        )

    # 4. Finish the drill from its page; the result marks each branch against the truth.
    page.get_by_role("link", name=re.compile("^Drill page")).click()
    check(page.get_by_role("heading", name=DRILL_TITLE)).to_be_visible()
    assert SCENARIO not in page.content()  # still hidden while it runs
    with page.expect_navigation():
        page.get_by_role("button", name="Finish drill and show the result").click()
    result = page.get_by_test_id("drill-result")
    check(result.get_by_test_id("scenario")).to_have_text(SCENARIO)
    check(result).to_contain_text("True causes: kv-cache-pressure")
    branches = page.get_by_test_id("drill-branches")
    for node, _, _, outcome, mark in DECISIONS:
        row = branches.locator(f'tr[data-node="{node}"]')
        check(row).to_have_attribute("data-outcome", outcome)
        check(row.locator(f'[data-mark="{mark}"]')).to_be_visible()
        check(row).to_contain_text(commander.get_username())
    # The path to the true cause counts as true: left undecided, it is marked neither way.
    check(branches.locator('tr[data-node="engine-queue"]')).to_have_attribute(
        "data-outcome", "undecided"
    )
    # high-ttft v2's tp-straggler is eliminated by the evidence (full clocks on every rank)
    # without the trainee: a third right branch.
    check(branches.locator('tr[data-node="tp-straggler"]')).to_have_attribute(
        "data-outcome", "eliminated-false"
    )
    check(branches.locator('[data-mark="right"]')).to_have_count(3)
    check(branches.locator('[data-mark="wrong"]')).to_have_count(1)
    check(page.get_by_test_id("drill-summary")).to_contain_text("3 of")
    check(page.get_by_test_id("drill-summary")).to_contain_text("First true cause confirmed")
    drill.refresh_from_db()
    assert drill.finished_by == commander
    assert drill.investigation.status == Investigation.Status.CLOSED
    screenshots.take(page, "drill-result")

    # 5. Review: the drill's reason phrase, under the Drill filter, finds the drill only.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Review").click()
    filters = page.get_by_role("search")
    filters.get_by_label("Search").fill(f'"{PHRASE}"')
    filters.get_by_label("Drill or real").select_option("drill")
    with page.expect_navigation():
        filters.get_by_role("button", name="Search").click()
    results = page.get_by_test_id("review-results")
    check(
        page.get_by_role("heading", name=re.compile(r"^1 investigation matching"))
    ).to_be_visible()
    check(results.locator(f'tr[data-id="{drill.investigation_id}"]')).to_contain_text(DRILL_TITLE)
    check(results.locator(f'tr[data-id="{real_investigation.pk}"]')).to_have_count(0)
    check(results.get_by_role("row").filter(has_text=DRILL_TITLE).locator(".badge")).to_have_text(
        "drill"
    )
    screenshots.take(page, "review-list-drill-filter")

    # ... and under Real, the same phrase finds the real incident and not the drill.
    filters = page.get_by_role("search")
    assert filters.get_by_label("Search").input_value() == f'"{PHRASE}"'  # the form kept it
    filters.get_by_label("Drill or real").select_option("real")
    with page.expect_navigation():
        filters.get_by_role("button", name="Search").click()
    results = page.get_by_test_id("review-results")
    check(results.locator(f'tr[data-id="{real_investigation.pk}"]')).to_contain_text(REAL_TITLE)
    check(results.locator(f'tr[data-id="{drill.investigation_id}"]')).to_have_count(0)
    check(results).not_to_contain_text(DRILL_TITLE)

    # 6. The drill's review page: its decisions with their reasons; add a comment.
    filters = page.get_by_role("search")
    filters.get_by_label("Drill or real").select_option("drill")
    with page.expect_navigation():
        filters.get_by_role("button", name="Search").click()
    page.get_by_test_id("review-results").get_by_role("link", name=DRILL_TITLE).click()
    check(page.get_by_role("heading", name=DRILL_TITLE)).to_be_visible()
    decisions = section(page, "Decisions")
    for node, _, reason, _, _ in DECISIONS:
        check(decisions.get_by_role("row").filter(has_text=node)).to_contain_text(reason)
    comments = page.locator("#comments")
    check(comments).to_contain_text("No comments yet.")
    comments.get_by_label("Comment").fill(COMMENT)
    with page.expect_navigation():
        comments.get_by_role("button", name="Add comment").click()
    check(page.get_by_role("status")).to_contain_text("Comment added.")
    check(page.locator(".review-comment")).to_contain_text(COMMENT)
    check(page.locator(".review-comment")).to_contain_text(commander.get_username())
    comment = ReviewComment.objects.get()
    assert comment.investigation_id == drill.investigation_id and comment.author == commander
    screenshots.take(page, "review-detail")

    # 7. Team statistics: the definitions are on the page, and drills are left out.
    page.get_by_role("link", name="← Review").click()
    page.get_by_role("link", name="Team statistics").click()
    check(page.get_by_role("heading", name=f"Team statistics: {team.name}")).to_be_visible()
    note = page.get_by_test_id("drills-note")
    check(note).to_contain_text("Drills are excluded")
    check(note).to_contain_text("(1 drill left out)")
    definitions = page.locator("dl.review-defs")
    for term in ("Time to root cause", "Time to verified fix (MTTR)", "Median and p90"):
        check(definitions.locator("dt", has_text=term)).to_be_visible()
    check(definitions).to_contain_text("to the first confirm decision on the hypothesis")
    check(definitions).to_contain_text("nearest-rank 90th percentile")
    # The one real investigation is still open: nothing is counted yet.
    check(note).to_contain_text("1 real investigation still open is not counted")
    ttrc = page.get_by_test_id("durations").get_by_role("row").filter(has_text="Time to root cause")
    check(ttrc.locator("td").nth(1)).to_have_text("0")
    screenshots.take(page, "team-stats")

    # Nothing the pages asked for left the live server.
    assert requests_seen.urls
    assert outside_origin(requests_seen.urls, live_server.url) == []
