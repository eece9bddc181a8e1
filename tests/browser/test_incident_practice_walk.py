"""Incident practice as a team runs it, walked in real headless Chromium (issue 18's
"done when"): single sign-on, a severity, roles and a handover of command, a status update
sent to every chat format, and a reviewed postmortem with action items, exported as PDF.

Who: alice and carol are users of the local OpenID Connect provider
(``tests/support/oidc_provider.py``, a real authorization-code flow with PKCE). alice's
group (``atlas-leads``) maps to commander of "SSO team", carol's (``atlas-oncall``) to
responder; each signs in through "Sign in with SSO" in a browser context of her own.

What: alice adds a Slack, a Mattermost and a Microsoft Teams incoming webhook on the team's
chat page, each pointing at its own real HTTP receiver on 127.0.0.1. She opens an
``itl-spikes`` investigation on the simulated deployment (scenario ``long-prefill-itl``),
sets SEV2 and confirms the true cause once the probes have polled; then she hands command
to carol with a reason. carol, now incident commander, records the fix and posts a status
update; each receiver gets the update once, in its chat's own format. The fix's
verification passes, alice closes the investigation; carol writes the postmortem's
narrative and two action items and asks for a review; alice publishes it and exports the
PDF, which ``pdftotext`` reads back: every section, the action items, the severity and the
roles. The team's page then lists both action items, none overdue.

Time and workers are as in ``test_incident_walk``: the test is the beat (each cycle moves
the manual-clock simulator and the virtual wall clock on by 15 s) and stands in for the
worker queues, running the real Celery tasks (``comms.deliver``, the PDF export) itself,
eagerly, on the beat's thread, once the page's request has queued them on commit.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta

import pytest

from comms import tasks as comms_tasks
from comms.models import ChatKind, Delivery, DeliveryState
from enginesim.config import FIX_FIELDS
from investigations import live
from investigations.choices import IncidentRole
from investigations.models import Investigation, RoleAssignment
from postmortems import tasks as postmortem_tasks
from postmortems.models import ActionItem, Export, Postmortem, ReviewState
from teams.models import Membership, Role, Team
from tests.browser.support import (
    CYCLE_S,
    Beat,
    expect,
    section,
    sign_in_with_sso,
)
from tests.conftest import require_service
from tests.support import builders
from tests.support.chat_receiver import Inbox, receiver
from tests.support.oidc_provider import TEAM

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CAUSE = "oversized-prefill-chunks"
CAUSE_TITLE = "Steps carry prefill chunks larger than the chunk budget"
CONFIRM_REASON = "Tokens per step p99 is far over the 512-token chunk budget"
HANDOVER_REASON = "alice goes off shift; carol has the simulator's history"
UPDATE = "Mitigating: chunk budget enforced at 512 tokens, p99 ITL recovering"
TITLE = "p99 ITL spikes on atlas-sim"
CHATS = {  # kind -> (the form's label, the webhook's name)
    ChatKind.SLACK: ("Slack", "ops-slack"),
    ChatKind.MATTERMOST: ("Mattermost", "ops-mattermost"),
    ChatKind.TEAMS: ("Microsoft Teams", "ops-teams"),
}
NARRATIVE = {  # the form's label -> what carol writes
    "Summary": "Long prompts were prefilled in one oversized chunk and p99 ITL spiked.",
    "Impact notes": "Priority chat users saw tokens stall for seconds mid-answer.",
    "Trigger": "A batch of 4k-10k-token priority prompts arrived at the morning peak.",
    "Detection notes": "The ITL alarm fired; the on-call opened the investigation from it.",
    "Resolution notes": "The chunk budget was enforced unconditionally at 512 tokens.",
    "What went well": "The tree confirmed the cause from the probes within minutes.",
    "What went wrong": "The chunk budget had been bypassed for priority requests.",
    "Where we got lucky": "The batch arrived before the evening peak.",
}
ACTION_ITEMS = (  # title, type, priority, owner (username), due in days
    ("Alert on tokens per step over the chunk budget", "Detect", "P1 (this week)", "carol", 7),
    ("Remove the priority bypass of the chunk budget", "Prevent", "P0 (now)", "alice", 2),
)


class Queue:
    """Stands in for a Celery queue: the product's ``delay``/``enqueue`` call on commit
    records the id here; the test runs the real task on it when it chooses."""

    def __init__(self) -> None:
        self.queued: list[str] = []

    def __call__(self, task_id) -> None:
        self.queued.append(str(task_id))

    delay = __call__


@pytest.fixture
def sso_team(db) -> Team:
    """The team the IdP's groups map to, holding the deployment before anyone signs in."""
    return Team.objects.create(name=TEAM)


@pytest.fixture
def deployment(sso_team, simulator):
    deployment = builders.deployment(sso_team, "atlas-sim", model_name="atlas-140b")
    # The engine log too: a V1 engine says its chunk budget only there.
    builders.targets(deployment, simulator.base, ("engine", "dcgm", "log_http"))
    return deployment


@pytest.fixture
def beat(simulator, clock, deployment) -> Iterator[Beat]:
    beat = Beat(simulator, clock, deployment)
    try:
        yield beat
    finally:
        beat.stop()


@pytest.fixture
def chats() -> Iterator[dict[str, tuple[Inbox, str]]]:
    """One real receiver per chat format on 127.0.0.1: kind -> (its inbox, its URL)."""
    with ExitStack() as stack:
        out = {}
        for kind in CHATS:
            inbox = Inbox()
            out[kind] = (inbox, stack.enter_context(receiver(inbox)) + f"/hooks/{kind}")
        yield out


@pytest.fixture
def second_page(chromium, live_server, requests_seen):
    """A second person's browser: a context of its own (cookies, IdP session), held to the
    same rules as ``page`` (no CSP refusal; its requests are seen too)."""
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1366, "height": 900}, accept_downloads=True
    )
    context.set_default_timeout(15_000)
    tab = context.new_page()
    tab.on("request", lambda request: requests_seen.urls.append(request.url))
    refused: list[str] = []
    tab.on(
        "console",
        lambda message: (
            refused.append(f"{tab.url}: {message.text}")
            if "Content Security Policy" in message.text
            else None
        ),
    )
    try:
        yield tab
    finally:
        context.close()
    assert not refused, "CSP refusals:\n" + "\n".join(refused)


def _pdf_text(path, *, layout: bool = True) -> str:
    flags = ["-layout"] if layout else []
    out = subprocess.run(
        ["pdftotext", *flags, str(path), "-"], check=True, capture_output=True, text=True
    ).stdout
    return " ".join(out.split())


def _check_bodies(chats, investigation, live_url: str) -> None:
    """Each receiver got the update once, in its own chat's format."""
    link = f"{live_url}/investigations/{investigation.pk}/"
    bodies = {}
    for kind, (inbox, url) in chats.items():
        [got] = inbox.received  # exactly once
        assert url.endswith(got.path)
        assert got.content_type == "application/json"
        bodies[kind] = got.json()
    slack = bodies[ChatKind.SLACK]
    assert slack["text"] == f"Status update: {investigation}: {UPDATE}"
    assert slack["blocks"][0]["type"] == "section"
    assert link in slack["blocks"][0]["text"]["text"]
    mattermost = bodies[ChatKind.MATTERMOST]
    assert mattermost["username"] == "Atlas Console"
    assert UPDATE in mattermost["text"] and link in mattermost["text"]
    [card] = bodies[ChatKind.TEAMS]["attachments"]
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["content"]["body"][1]["text"] == UPDATE
    assert card["content"]["body"][2]["text"].startswith("atlas-sim · carol · ")


def test_a_team_runs_an_incident_from_sso_to_a_published_postmortem(
    page,
    second_page,
    live_server,
    sso_on,
    requests_seen,
    screenshots,
    clock,
    simulator,
    beat,
    deployment,
    chats,
    settings,
    tmp_path,
    monkeypatch,
):
    if not shutil.which("pdftotext"):
        require_service("poppler-utils", "pdftotext is not installed")
    origin = live_server.url
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.ATLAS_PUBLIC_URL = origin
    deliveries = Queue()
    monkeypatch.setattr(comms_tasks, "enqueue", deliveries)
    exports, render = Queue(), postmortem_tasks.export_postmortem
    monkeypatch.setattr(postmortem_tasks, "export_postmortem", exports)
    alice, carol = page, second_page
    simulator.advance(120)  # the incident has been under way for two minutes
    clock.advance(120)

    # 1. alice signs in through the IdP and lands in the team as its groups say: commander.
    sign_in_with_sso(alice, origin, "alice")
    expect()(alice.get_by_role("status")).to_contain_text(f"joined {TEAM} as commander")
    assert Membership.objects.get(user__username="alice", team__name=TEAM).role == Role.COMMANDER
    [authorize] = [u for u in requests_seen.urls if "/o/authorize/?" in u][:1]
    assert "code_challenge_method=S256" in authorize  # PKCE

    # 2. On the team's page, a webhook per chat format, each at its own receiver.
    section(alice, "Your teams").get_by_role("link", name=TEAM).click()
    expect()(alice.get_by_role("heading", name=TEAM, exact=True)).to_be_visible()
    alice.get_by_role("link", name="Manage chat webhooks").click()
    for kind, (label, name) in CHATS.items():
        alice.get_by_label("Name").fill(name)
        alice.get_by_label("Kind").select_option(label=label)
        alice.get_by_label("Incoming webhook URL").fill(chats[kind][1])
        with alice.expect_navigation():
            alice.get_by_role("button", name="Add").click()
        expect()(alice.get_by_role("status")).to_contain_text(name)
        row = alice.get_by_role("row").filter(has_text=name)
        expect()(row).to_contain_text(label)
        expect()(row).to_contain_text("enabled")
    alice.get_by_role("link", name=TEAM).click()
    expect()(section(alice, "Chat")).to_contain_text("go to 3 enabled chat webhooks")

    # 3. carol signs in through the IdP in her own browser: a responder of the same team.
    sign_in_with_sso(carol, origin, "carol")
    expect()(carol.get_by_role("status")).to_contain_text(f"joined {TEAM} as responder")

    # 4. alice opens the investigation from the deployment page; she commands it first.
    alice.goto(f"/deployments/{deployment.pk}/")
    alice.get_by_label("Symptom").select_option(label="p99 inter-token latency over the ceiling")
    alice.get_by_label("Title").fill(TITLE)
    alice.get_by_role("button", name="Open investigation").click()
    expect()(alice.get_by_role("heading", name=TITLE)).to_be_visible()
    investigation = Investigation.objects.get()
    detail = f"/investigations/{investigation.pk}/"
    expect()(alice.get_by_test_id("incident-commander")).to_have_text("alice")

    # The severity, chosen where its definitions are shown.
    severity = alice.get_by_test_id("severity-panel")
    expect()(severity).to_contain_text("SEV2")
    expect()(severity).to_contain_text("Major: a core function is badly degraded")
    severity.get_by_label("Severity").select_option(label="SEV2")
    with alice.expect_navigation():
        severity.get_by_role("button", name="Set severity").click()
    expect()(alice.get_by_role("status")).to_contain_text("Severity set to SEV2.")
    expect()(alice.get_by_test_id("severity")).to_have_text("SEV2")

    # 5. The probes poll; alice confirms the true cause and the status follows: identified.
    beat.run(8)
    alice.reload()
    cause = alice.get_by_test_id(f"node-{CAUSE}")
    expect()(cause.locator("summary")).to_contain_text("suggests confirm")
    cause.get_by_label(f"Reason for {CAUSE_TITLE}").fill(CONFIRM_REASON)
    with alice.expect_navigation():
        cause.get_by_role("button", name="Confirm").click()
    expect()(alice.get_by_role("status")).to_contain_text(f"confirm {CAUSE} recorded")
    expect()(alice.get_by_test_id("incident-status")).to_have_text("Identified")

    # 6. alice hands command to carol, with a reason; the header names the new commander.
    roles = alice.get_by_test_id("command-panel")
    roles.get_by_label("Role").select_option(label="Incident commander")
    roles.get_by_label("Member").select_option(label="carol")
    roles.get_by_label("Reason (needed to hand over command)").fill(HANDOVER_REASON)
    with alice.expect_navigation():
        roles.get_by_role("button", name="Assign").click()
    expect()(alice.get_by_role("status")).to_contain_text("Roles updated.")
    expect()(alice.get_by_test_id("incident-commander")).to_have_text("carol")
    held = RoleAssignment.objects.filter(investigation=investigation, ended_at__isnull=True)
    assert list(held.values_list("role", "user_name")) == [(IncidentRole.COMMANDER, "carol")]

    # 7. carol, now incident commander, records the fix and posts a status update.
    carol.goto(detail)
    expect()(carol.get_by_test_id("incident-commander")).to_have_text("carol")
    expect()(carol.get_by_test_id("command-panel").get_by_label("Status")).to_be_visible()
    carol.get_by_label("Note").fill("Rolled --max-num-batched-tokens 512 with chunked prefill")
    with carol.expect_navigation():
        carol.get_by_role("button", name="Record fix as applied").click()
    expect()(carol.get_by_role("status")).to_contain_text("Fix recorded")
    expect()(carol.get_by_test_id("incident-status")).to_have_text("Monitoring")
    fix = live.current_state(investigation).result.find(CAUSE).fix
    simulator.post("/control/fix", {k: FIX_FIELDS[k][0](v) for k, v in dict(fix.apply).items()})

    carol.get_by_label(re.compile("^Post a status update")).fill(UPDATE)
    with carol.expect_navigation():
        carol.get_by_role("button", name="Post update").click()
    expect()(carol.get_by_role("status")).to_contain_text("sending to 3 chat channel(s)")
    expect()(carol.get_by_test_id("current-status")).to_contain_text(UPDATE)
    expect()(carol.get_by_test_id("current-status")).to_contain_text("carol")
    # The sends were queued on commit, one per webhook; the worker runs them.
    assert len(deliveries.queued) == 3
    for delivery_id in deliveries.queued:
        assert beat.call(lambda d=delivery_id: comms_tasks.deliver.apply(args=[d]).get()) == (
            DeliveryState.SENT
        )
    _check_bodies(chats, investigation, origin)
    # A redelivered task (a worker lost after the send) sends nothing again.
    for delivery_id in deliveries.queued:
        beat.call(lambda d=delivery_id: comms_tasks.deliver.apply(args=[d]).get())
    assert [len(inbox.received) for inbox, _ in chats.values()] == [1, 1, 1]
    assert set(Delivery.objects.values_list("state", "attempts")) == {(DeliveryState.SENT, 1)}
    screenshots.take(carol, "status-update-posted")

    # 8. The verification window passes; alice (team commander) closes the investigation.
    window = investigation.fixes.get().applied_at
    beat.run(600 // CYCLE_S + 4)
    assert clock.now() - window > timedelta(seconds=600)
    alice.goto(detail)
    expect()(section(alice, "Verification of").locator("h2")).to_contain_text("passing")
    with alice.expect_navigation():
        alice.get_by_role("button", name="Close investigation").click()
    expect()(alice.get_by_role("status")).to_contain_text("Investigation closed.")
    expect()(alice.get_by_test_id("incident-status")).to_have_text("Resolved")

    # 9. carol writes the postmortem's narrative and its action items, and asks for review.
    carol.goto(detail)
    carol.get_by_role("link", name="Postmortem", exact=True).click()
    expect()(carol.get_by_role("heading", name=f"Postmortem: {TITLE}")).to_be_visible()
    edit = section(carol, "Edit the narrative")
    for label, text in NARRATIVE.items():
        edit.get_by_label(label, exact=True).fill(text)
    edit.get_by_label("What changed (optional)").fill("First draft")
    with carol.expect_navigation():
        edit.get_by_role("button", name="Save as a new version").click()
    expect()(carol.get_by_role("status")).to_contain_text("Saved as version 1.")
    today = clock.now().date()
    for title, kind, priority, owner, days in ACTION_ITEMS:
        form = section(carol, "Add an action item")
        form.get_by_label("Title").fill(title)
        form.get_by_label("Type").select_option(label=kind)
        form.get_by_label("Priority").select_option(label=priority)
        form.get_by_label("Owner", exact=True).select_option(label=owner)
        form.get_by_label("Due").fill((today + timedelta(days=days)).isoformat())
        with carol.expect_navigation():
            form.get_by_role("button", name="Add").click()
        expect()(carol.get_by_role("status")).to_contain_text("Action item added.")
    items = section(carol, "Action items")
    for title, _kind, _priority, owner, _days in ACTION_ITEMS:
        expect()(items.get_by_role("row").filter(has_text=title)).to_contain_text(owner)
    with carol.expect_navigation():
        carol.get_by_role("button", name="Ask for a review of version 1").click()
    expect()(carol.get_by_test_id("pm-review")).to_contain_text("in review")
    expect()(carol.get_by_test_id("pm-review")).to_contain_text("asked by carol")
    # carol is a responder: publishing is a team commander's.
    expect()(carol.get_by_role("button", name=re.compile("^Reviewed: publish"))).to_have_count(0)

    # 10. alice reviews and publishes it, then exports the PDF.
    alice.goto(f"{detail}postmortem/")
    with alice.expect_navigation():
        alice.get_by_role("button", name="Reviewed: publish version 1").click()
    expect()(alice.get_by_test_id("pm-review")).to_contain_text("reviewed by alice")
    version = Postmortem.objects.get(investigation=investigation).versions.get()
    assert version.review_state == ReviewState.PUBLISHED and version.reviewer_name == "alice"
    assert version.review_requested_by.username == "carol"
    assert ActionItem.objects.filter(postmortem__investigation=investigation).count() == 2
    screenshots.take(alice, "postmortem-published")
    status = alice.locator("#export-status")
    alice.get_by_role("button", name="Export PDF").click()
    expect()(status).to_contain_text("Queued")
    export = Export.objects.get()
    assert exports.queued == [str(export.pk)]
    assert beat.call(lambda: render.apply(args=[str(export.pk)]).get()) == "done"
    download = status.get_by_role("link", name="Download")
    expect()(download).to_be_visible(timeout=20_000)  # the page polls every 2 s
    with alice.expect_download() as info:
        download.click()
    pdf = tmp_path / "postmortem.pdf"
    info.value.save_as(pdf)
    assert pdf.read_bytes().startswith(b"%PDF")
    text = _pdf_text(pdf)
    flow = _pdf_text(pdf, layout=False)  # table cells whole, in reading order

    # 11. The PDF has every section, the narrative, the action items, severity and roles.
    for heading in (
        "Summary", "Impact", "Trigger", "Detection", "Resolution", "Root cause",
        "Lessons learned", "What went well", "What went wrong", "Where we got lucky",
        "Action items", "Timeline (UTC)", "Supporting evidence", "Severity, status and roles",
    ):  # fmt: skip
        assert heading in text, heading
    for written in NARRATIVE.values():
        assert written in text, written
    for title, kind, priority, owner, _days in ACTION_ITEMS:
        assert re.search(
            rf"{re.escape(title)} {kind.lower()} {priority.split()[0]} {owner} \d{{4}}-\d\d-\d\d",
            text,
        ), title
    assert f"Root cause {CAUSE_TITLE} {CAUSE}" in text
    assert "Duration from the alarm's samples:" in text and "SLO burn:" in text
    assert "Severity SEV2 Status Resolved" in text
    assert "SEV2 not set alice" in text  # the severity's history: set by alice
    assert "Roles Incident commander carol" in flow
    assert f"handed over from alice carol alice {HANDOVER_REASON}" in flow  # what, who, by, why
    assert f"status_update carol Status: {UPDATE}" in flow  # on the timeline
    assert "published at" in text and "reviewed by alice" in text

    # The team's page lists the action items across its postmortems, none overdue.
    alice.goto(f"/teams/{deployment.team_id}/")
    listed = alice.get_by_test_id("team-action-items")
    expect()(listed).to_contain_text("2 open")
    for title, kind, _priority, owner, _days in ACTION_ITEMS:
        row = listed.get_by_role("row").filter(has_text=title)
        expect()(row).to_contain_text(TITLE)
        expect()(row).to_contain_text(kind)
        expect()(row).to_contain_text(owner)
    expect()(listed.get_by_text("overdue", exact=True)).to_have_count(0)

    # Nothing the pages asked for left the live server and the local IdP.
    assert [u for u in requests_seen.outside(origin) if not u.startswith(sso_on.base)] == []
