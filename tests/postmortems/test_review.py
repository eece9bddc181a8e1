"""The postmortem as teams write it: the sections the record fills in (impact from the
alarm's samples, detection, resolution), the review workflow (draft -> in review ->
published, reviewer and date recorded, the published version frozen and later edits a new
version), and action items with a priority, audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from audit.models import AuditEntry
from postmortems import actions
from postmortems.models import ActionItem, Postmortem, PostmortemVersion, ReviewState
from postmortems.record import ERROR_BUDGET_S, load_document, sample_impact

SECTIONS = {
    "summary": "TTFT tripled for 19 minutes at the morning peak.",
    "impact_notes": "Chat users saw the first token after two seconds.",
    "trigger": "A marketing push doubled long prompts.",
    "detection_notes": "The on-call noticed before the page.",
    "resolution_notes": "Fewer sequences per replica, rolled one by one.",
    "went_well": "The alarm fired within a minute.",
    "went_wrong": "The KV budget was never revisited after the model upgrade.",
    "lucky": "The push ended before the evening peak.",
}


def _post(client, name, investigation, data):
    return client.post(reverse(f"postmortems:{name}", args=[investigation.pk]), data)


def _page(client, investigation, query=""):
    response = client.get(reverse("postmortems:detail", args=[investigation.pk]) + query)
    assert response.status_code == 200
    return response.content.decode()


def test_the_record_fills_in_impact_detection_and_resolution(incident, t0):
    doc = load_document(incident)
    impact = doc["impact"]
    # The storm's samples (every 30 s) are over 0.6 from T0-3m; the last one, at T0+15m30s,
    # holds until the next sample at T0+16m: 19 minutes.
    assert impact["sample_breach_s"] == 19 * 60
    assert impact["sample_first_at"] == t0 - timedelta(minutes=3)
    assert impact["sample_last_at"] == t0 + timedelta(minutes=16)
    assert ERROR_BUDGET_S == 2592  # 0.1 % of 30 days
    assert impact["slo"]["burned_pct"] == pytest.approx(100 * 1140 / 2592)
    detection = doc["detection"]
    assert detection["how"] == "a person opened it"
    assert detection["detected_at"] == t0
    assert detection["delay_s"] == -30  # opened 30 s before the alarm's first firing event
    resolution = doc["resolution"]
    assert resolution["fix_applied_at"] == t0 + timedelta(minutes=15)
    # Closed on a passing verification with no "passing" event: the close is the bound.
    assert resolution["verified_at"] == t0 + timedelta(minutes=35)
    assert resolution["to_verified_fix_s"] == 35 * 60


def test_the_sample_duration_joins_engines_and_caps_a_gap():
    t = 1_000_000.0
    one = [(t, 1.0), (t + 10, 1.0), (t + 20, 0.1), (t + 30, 0.1)]  # over for 20 s
    # Over from +15 to +25 (joined with the first: +0..+25); then one sample at +55 before
    # a long gap: it holds at most twice the usual spacing (20 s), not until +155.
    two = [(t + 5, 0.1), (t + 15, 2.0), (t + 25, 0.1), (t + 35, 0.1), (t + 45, 0.1)]
    two += [(t + 55, 3.0), (t + 155, 0.1)]
    out = sample_impact([one, two], ">", 0.5)
    assert out["sample_breach_s"] == 25 + 20
    assert out["sample_first_at"] == datetime.fromtimestamp(t, tz=UTC)
    # Under 0.5 from +20 until the next sample at +30; the last sample is an instant.
    assert sample_impact([one], "<", 0.5)["sample_breach_s"] == 10
    nothing = sample_impact([one], ">", 5.0)
    assert nothing["sample_breach_s"] is None and nothing["slo"]["burned_pct"] is None


def test_a_reviewed_version_is_published_frozen_and_later_edits_are_new_versions(
    client_for, responder, commander, incident, frozen_now
):
    def writer():
        return client_for(responder)

    def reviewer():
        return client_for(commander)

    with pytest.raises(actions.ReviewRefused, match="Nothing is written yet"):
        actions.publish(investigation=incident, user=commander, number=1)
    assert _post(writer(), "edit", incident, {"base_version": 0, **SECTIONS}).status_code == 302
    with pytest.raises(actions.ReviewRefused, match="only a version in review"):
        actions.publish(investigation=incident, user=commander, number=1)
    page = _page(writer(), incident)
    assert "Ask for a review of version 1" in page
    assert "Reviewed: publish version 1" not in page  # responders do not publish
    assert _post(writer(), "request_review", incident, {"version": 1}).status_code == 302
    version = PostmortemVersion.objects.get()
    assert (version.review_state, version.review_requested_by) == ("in_review", responder)
    assert "Reviewed: publish version 1" in _page(reviewer(), incident)

    assert _post(reviewer(), "publish", incident, {"version": 1}).status_code == 302
    version.refresh_from_db()
    assert version.review_state == ReviewState.PUBLISHED
    assert (version.reviewed_by, version.reviewer_name) == (commander, "cora-commander")
    assert version.published_at == frozen_now
    published = version.published_markdown
    assert "- **Review:** published at" in published and "reviewed by cora-commander" in published
    assert SECTIONS["lucky"] in published and "## Lessons learned" in published

    # An edit after publishing is a new draft version; the published one is untouched.
    edited = {**SECTIONS, "summary": "TTFT tripled for 19 minutes (corrected)."}
    assert _post(writer(), "edit", incident, {"base_version": 1, **edited}).status_code == 302
    v1, v2 = PostmortemVersion.objects.order_by("number")
    assert (v1.review_state, v2.review_state) == ("published", "draft")
    assert v1.published_markdown == published and v1.sections["summary"] == SECTIONS["summary"]
    newest = _page(writer(), incident)
    assert "(corrected)" in newest and 'data-testid="pm-review">draft<' in newest
    assert "?version=1" in newest and "?version=2" in newest  # the versions, listed
    first = _page(writer(), incident, "?version=1")
    assert "You are reading version 1" in first and "(corrected)" not in first
    assert SECTIONS["summary"] in first and "reviewed by cora-commander" in first
    assert 'action="/investigations/' not in first.split('id="review"')[1]  # read-only
    assert (
        writer().get(reverse("postmortems:detail", args=[incident.pk]) + "?version=9").status_code
        == 404
    )

    assert list(
        AuditEntry.objects.filter(investigation=incident, action__startswith="postmortem.")
        .order_by("id")
        .values_list("action", "actor_name")
    ) == [
        ("postmortem.narrative", "remi-responder"),
        ("postmortem.review_request", "remi-responder"),
        ("postmortem.publish", "cora-commander"),
        ("postmortem.narrative", "remi-responder"),
    ]


def test_review_steps_that_do_not_apply_are_refused(
    client_for, responder, commander, viewer, open_incident
):
    def writer():
        return client_for(responder)

    assert _post(writer(), "request_review", open_incident, {"version": 1}).status_code == 302
    assert not PostmortemVersion.objects.exists()  # nothing written: nothing to review
    _post(writer(), "edit", open_incident, {"base_version": 0, "summary": "So far"})
    assert (
        client_for(viewer)
        .post(reverse("postmortems:request_review", args=[open_incident.pk]), {"version": 1})
        .status_code
        == 403
    )
    _post(writer(), "request_review", open_incident, {"version": 1})
    with pytest.raises(actions.ReviewRefused, match="already In review"):
        actions.request_review(investigation=open_incident, user=responder, number=1)
    assert _post(writer(), "publish", open_incident, {"version": 1}).status_code == 403
    # Open: its record is not frozen yet, so it cannot be published.
    response = client_for(commander).post(
        reverse("postmortems:publish", args=[open_incident.pk]), {"version": 1}, follow=True
    )
    assert "Close the investigation before publishing" in response.content.decode()
    _post(writer(), "edit", open_incident, {"base_version": 1, "summary": "Later"})
    with pytest.raises(actions.ReviewRefused, match="Version 2 was saved since"):
        actions.request_review(investigation=open_incident, user=responder, number=1)
    assert set(PostmortemVersion.objects.values_list("review_state", flat=True)) == {
        "in_review",
        "draft",
    }


def test_action_items_carry_a_priority_are_audited_and_flag_overdue(
    responder, commander, incident, frozen_now
):
    today = frozen_now.date()
    late = actions.add_action_item(
        investigation=incident,
        title="Alert on KV usage",
        type="detect",
        priority="p1",
        owner=commander,
        due=today - timedelta(days=1),
        user=responder,
    )
    actions.add_action_item(
        investigation=incident, title="Runbook", type="process", due=today, user=responder
    )
    with pytest.raises(ValueError, match="priority"):
        actions.add_action_item(
            investigation=incident, title="x", type="detect", priority="p9", user=responder
        )
    items = {i["title"]: i for i in load_document(incident)["action_items"]}
    assert items["Alert on KV usage"]["priority"] == "p1" and items["Runbook"]["priority"] == "p2"
    assert items["Alert on KV usage"]["overdue"] and not items["Runbook"]["overdue"]
    assert actions.close_action_item(item=late, user=commander)
    assert not actions.close_action_item(item=late, user=commander)  # once
    assert not {i["title"]: i for i in load_document(incident)["action_items"]}[
        "Alert on KV usage"
    ]["overdue"]
    assert list(
        AuditEntry.objects.filter(action__startswith="postmortem.action_item")
        .order_by("id")
        .values_list("action", "summary")
    ) == [
        ("postmortem.action_item", "Added action item (detect, p1): Alert on KV usage"),
        ("postmortem.action_item", "Added action item (process, p2): Runbook"),
        ("postmortem.action_item_done", "Marked action item done: Alert on KV usage"),
    ]


@pytest.mark.parametrize(
    "fields",
    [
        {"review_state": "published"},  # no reviewer, no date
        {"review_state": "in_review"},  # nobody asked
        {"review_state": "draft", "reviewer_name": "cora"},  # a reviewer on a draft
        {"review_state": "approved"},
    ],
)
def test_the_database_refuses_inconsistent_review_states(incident, fields):
    postmortem = Postmortem.objects.create(team=incident.team, investigation=incident)
    with pytest.raises(IntegrityError), transaction.atomic():
        PostmortemVersion.objects.create(postmortem=postmortem, number=1, **fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "detective"},
        {"priority": "p9"},
        {"status": "done"},  # done without a time
        {"closed_at": datetime(2026, 1, 1, tzinfo=UTC)},  # closed but open
    ],
)
def test_the_database_refuses_inconsistent_action_items(incident, fields):
    postmortem = Postmortem.objects.create(team=incident.team, investigation=incident)
    with pytest.raises(IntegrityError), transaction.atomic():
        ActionItem.objects.create(postmortem=postmortem, title="x", **{"type": "detect", **fields})


def test_a_published_version_with_reviewer_and_date_is_accepted(incident, commander):
    postmortem = Postmortem.objects.create(team=incident.team, investigation=incident)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    PostmortemVersion.objects.create(
        postmortem=postmortem,
        number=1,
        review_state="published",
        review_requested_at=at,
        published_at=at,
        reviewed_by=commander,
        reviewer_name="cora-commander",
    )
