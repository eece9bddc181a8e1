"""The timeline is typed: one ``record_event`` writes each event (and, for someone's
action, its audit entry in the same transaction); what other modules read back is the
event's kind and data, never its wording; and API decisions name the token."""

from __future__ import annotations

import importlib
import json
from datetime import timedelta

import pytest
from django.apps import apps
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from audit.actor import Actor
from audit.models import AuditEntry
from investigations import actions, choices, evaluation, verification
from investigations.choices import EventKind
from investigations.models import Decision, Investigation, TimelineEvent
from investigations.panels import record_marks
from investigations.timeline import AUDITED, record_event
from investigations.tokens import create_token
from postmortems.record import load_document

pytestmark = pytest.mark.django_db

backfill_migration = importlib.import_module("investigations.migrations.0012_typed_timeline_events")


@pytest.fixture
def investigation(deployment, commander):
    return actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)


def test_an_action_writes_its_event_and_audit_entry_together(investigation, commander):
    before = AuditEntry.objects.count()
    record_event(
        investigation,
        EventKind.DECISION,
        actor=commander,
        summary="eliminate router-latency: seen",
        data={"node": "router-latency", "action": "eliminate"},
    )
    assert AuditEntry.objects.count() == before + 1
    with pytest.raises(RuntimeError), transaction.atomic():
        record_event(investigation, EventKind.FIX, actor=commander, summary="s", data={})
        raise RuntimeError("the action fails after writing")
    assert AuditEntry.objects.count() == before + 1
    assert not investigation.timeline.filter(kind="fix").exists()


def test_what_automation_observed_is_timeline_only(investigation):
    before = AuditEntry.objects.count()
    for kind in set(EventKind) - set(AUDITED):
        record_event(investigation, kind, actor=None, summary=f"{kind} happened", data={})
    assert AuditEntry.objects.count() == before
    assert set(AUDITED) == {
        EventKind.OPENED,
        EventKind.DECISION,
        EventKind.FIX,
        EventKind.CLOSED,
        EventKind.SEVERITY,
        EventKind.STATUS_UPDATE,
        EventKind.STATUS,
        EventKind.ROLE,
    }
    # A status that followed the record (a fix, the verification) is not someone's action.
    record_event(investigation, EventKind.STATUS, actor=None, summary="s", data={"automatic": True})
    assert AuditEntry.objects.count() == before


def test_every_action_event_carries_its_structured_data(investigation, responder):
    opened = investigation.timeline.get(kind="opened")
    assert opened.data == {"opened_by": "cora-commander", "symptom": "high-ttft", "fingerprint": ""}
    decision = actions.decide(
        investigation=investigation,
        node="kv-cache-pressure",
        action="confirm",
        reason="KV at 94 %",
        user=responder,
        evidence={},
    )
    event = investigation.timeline.get(kind="decision")
    assert event.data == {
        "decision": str(decision.pk),
        "node": "kv-cache-pressure",
        "action": "confirm",
        "automatic": False,
    }
    assert event.actor == responder
    fix = actions.record_fix(
        investigation=investigation,
        node="kv-cache-pressure",
        parameters={"max_num_seqs": 30.0},
        user=responder,
    )
    assert investigation.timeline.get(kind="fix").data == {
        "fix": str(fix.pk),
        "node": "kv-cache-pressure",
        "key": "fewer-max-num-seqs",
        "parameters": {"max_num_seqs": 30.0},
    }
    actions.close_investigation(investigation=investigation, user=responder, override="by hand")
    closed = investigation.timeline.get(kind="closed").data
    assert closed["override"] is True and closed["root_cause"] == "kv-cache-pressure"
    assert AuditEntry.objects.filter(action="investigation.close_override").count() == 1


def test_the_chart_marks_the_alarm_from_its_data_not_its_wording(investigation):
    record_event(
        investigation,
        EventKind.ALARM,
        actor=None,
        summary="Alarm firing: 1.4 against 0.6",
        data={"firing": False, "measured": 0.3, "threshold": 0.6},
    )
    assert not [m for m in record_marks(investigation) if m.kind == "alarm"]
    record_event(
        investigation,
        EventKind.ALARM,
        actor=None,
        summary="The alarm went off (reworded)",
        data={"firing": True, "measured": 1.4, "threshold": 0.6},
    )
    assert [m.label for m in record_marks(investigation) if m.kind == "alarm"] == ["alarm firing"]


def test_an_api_decision_names_its_token(client, deployment, commander, team):
    token = create_token(team=team, name="ci-bot", user=commander)[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    opened = client.post(
        reverse("api:open"),
        data=json.dumps({"deployment": deployment.name, "symptom": "itl-spikes"}),
        content_type="application/json",
        **headers,
    ).json()
    response = client.post(
        reverse("api:decisions", args=[opened["id"]]),
        data=json.dumps({"node": "gc-pauses", "action": "eliminate", "reason": "gc disabled"}),
        content_type="application/json",
        **headers,
    )
    assert response.status_code == 201
    entry = AuditEntry.objects.get(action="decision")
    assert (entry.actor, entry.actor_name) == (None, "API token ci-bot")
    event = TimelineEvent.objects.get(kind="decision")
    assert (event.actor, event.shown_actor) == (None, "API token ci-bot")
    doc = load_document(Investigation.objects.get(pk=opened["id"]))
    assert [e["actor"] for e in doc["timeline"]] == ["API token ci-bot", "API token ci-bot"]
    assert AuditEntry.objects.get(action="investigation.open").actor_name == "API token ci-bot"
    assert Decision.objects.get().decided_by is None


def test_an_automatic_rule_and_a_person_are_named_as_before(investigation, responder):
    assert Actor.of(None, name="automatic rule").name == "automatic rule"
    assert Actor.of(responder) == Actor(responder, "remi-responder")
    actions.decide(
        investigation=investigation,
        node="router-latency",
        action="eliminate",
        reason="Automatic (3 consecutive cycles)",
        user=None,
        evidence={},
        automatic=True,
    )
    assert AuditEntry.objects.get(action="decision").actor_name == "automatic rule"


def test_the_vocabulary_keeps_the_stored_strings():
    """Rows, frozen records and templates hold these strings: a member is its string."""
    assert [*map(str, choices.NodeState)] == ["open", "confirmed", "eliminated"]
    assert [*map(str, choices.Suggestion)] == ["confirm", "eliminate", "inconclusive"]
    assert [*map(str, choices.DecisionAction)] == ["confirm", "eliminate", "reopen"]
    assert [*map(str, choices.VerificationState)] == [
        "pending",
        "passing",
        "failing",
        "unattributable",
        "none",
    ]
    assert choices.STATE_AFTER["confirm"] == "confirmed" and json.dumps(choices.NodeState.OPEN)
    assert Decision.Action.choices() == [
        ("confirm", "Confirm"),
        ("eliminate", "Eliminate"),
        ("reopen", "Reopen"),
    ]
    # The pure modules speak the same vocabulary.
    assert evaluation.CONFIRM is choices.Suggestion.CONFIRM
    assert verification.VerificationState is choices.VerificationState
    assert {k.value for k in EventKind} == {
        c for c, _ in TimelineEvent._meta.get_field("kind").choices
    }


@pytest.mark.parametrize(
    ("kind", "summary", "data", "expected"),
    [
        (
            "alarm",
            "Alarm firing: 1.4 against 0.6",
            {"measured": 1.4, "threshold": 0.6},
            {"firing": True, "measured": 1.4, "threshold": 0.6},
        ),
        (
            "alarm",
            "Alarm clear: 0.35 against 0.6",
            {},
            {"firing": False, "measured": 0.35, "threshold": 0.6},
        ),
        (
            "opened",
            "Opened from symptom high-ttft by bob",
            {},
            {"opened_by": "bob", "symptom": "s"},
        ),
        (
            "decision",
            "eliminate gc-pauses: gc disabled",
            {},
            {"action": "eliminate", "node": "gc-pauses"},
        ),
        (
            "fix",
            "Applied chunk for n (no parameters)",
            {"fix": "1"},
            {"fix": "1", "key": "chunk", "node": "n"},
        ),
        (
            "closed",
            "Closed with override: by hand",
            {},
            {"override": True, "root_cause": "n", "verification": "failing"},
        ),
        (
            "suggestion",
            "Evidence suggests confirm n (a: b)",
            {},
            {"suggestion": "confirm", "node": "n"},
        ),
        ("verification", "Verification of chunk passing", {}, {"state": "passing"}),
        (
            "alarm",
            "Alarm firing: 2 against 1",
            {"firing": False},
            {"firing": False, "measured": 2.0, "threshold": 1.0},
        ),
        ("artifact", "x.pickle uploaded", {"artifact": "a"}, {"artifact": "a"}),
    ],
)
def test_the_migration_recovers_what_the_summaries_said(kind, summary, data, expected):
    """Only missing keys are filled: what a row already stored wins."""
    inv = {
        "opened_by_name": "",
        "symptom": "s",
        "root_cause": "n",
        "closing_facts": {"verification": {"state": "failing"}},
    }
    assert backfill_migration.recovered(kind, summary, data, inv) == expected


def test_the_migration_types_old_rows_and_the_record_reads_them(investigation):
    now = timezone.now()
    old = [
        TimelineEvent(investigation=investigation, kind="alarm", summary=s, data=d)
        for s, d in [
            ("Alarm firing: 1.4 against 0.6", {"measured": 1.4, "threshold": 0.6}),
            ("Alarm clear: 0.3 against 0.6", {"measured": 0.3, "threshold": 0.6}),
        ]
    ]
    TimelineEvent.objects.bulk_create(old)
    for minutes, event in enumerate(old, start=1):
        TimelineEvent.objects.filter(pk=event.pk).update(at=now + timedelta(minutes=minutes))
    investigation.timeline.filter(kind="opened").update(data={}, actor=None, actor_name="")
    backfill_migration.backfill(apps, None)
    opened = investigation.timeline.get(kind="opened")
    assert opened.data["opened_by"] == "cora-commander"  # from the investigation
    assert opened.shown_actor == "automation"  # a name never stored is not made up
    fired = [e.data["firing"] for e in investigation.timeline.filter(kind="alarm").order_by("at")]
    assert fired == [True, False]
    breaches = load_document(Investigation.objects.get(pk=investigation.pk))["impact"]
    assert breaches["breach_s"] == pytest.approx(60)
