"""The incident status (investigating -> identified -> monitoring -> resolved) follows the
record forward by itself and a commander may set it either way with a reason; each move is
a typed timeline event, and a person's move is audited."""

from __future__ import annotations

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from investigations import actions
from investigations.choices import EventKind, IncidentStatus
from investigations.models import Investigation, TimelineEvent

pytestmark = pytest.mark.django_db

CAUSE = "kv-cache-pressure"  # a leaf of high-ttft with a fix
BRANCH = "engine-queue"  # a hypothesis with children: confirming it names no root cause


@pytest.fixture
def investigation(deployment, commander):
    return actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)


def _confirm(investigation, node, user):
    return actions.decide(
        investigation=investigation,
        node=node,
        action="confirm",
        reason="seen",
        user=user,
        evidence={},
    )


def _statuses(investigation) -> list[dict]:
    events = TimelineEvent.objects.filter(investigation=investigation, kind=EventKind.STATUS)
    return [e.data for e in events.order_by("at", "pk")]


def test_the_status_follows_cause_fix_and_close(investigation, responder, commander):
    assert investigation.incident_status == IncidentStatus.INVESTIGATING
    _confirm(investigation, BRANCH, responder)
    investigation.refresh_from_db()
    assert investigation.incident_status == IncidentStatus.INVESTIGATING  # no root cause yet
    audited = AuditEntry.objects.count()
    _confirm(investigation, CAUSE, responder)
    actions.record_fix(
        investigation=investigation, node=CAUSE, parameters={"max_num_seqs": 30.0}, user=responder
    )
    # Following is part of the decision's and the fix's action: only those are audited.
    assert AuditEntry.objects.count() == audited + 2
    actions.close_investigation(investigation=investigation, user=commander, override="by hand")
    investigation.refresh_from_db()
    assert investigation.incident_status == IncidentStatus.RESOLVED
    assert _statuses(investigation) == [
        {"status": "identified", "previous": "investigating", "automatic": True,
         "reason": f"root cause {CAUSE} confirmed"},
        {"status": "monitoring", "previous": "identified", "automatic": True,
         "reason": "fix fewer-max-num-seqs recorded"},
        {"status": "resolved", "previous": "monitoring", "automatic": True, "reason": "closed"},
    ]  # fmt: skip
    event = TimelineEvent.objects.filter(kind=EventKind.STATUS).order_by("at", "pk").first()
    assert event.summary == f"Status Identified (was Investigating): root cause {CAUSE} confirmed"


def test_a_passing_verification_resolves_and_following_never_goes_back(investigation, commander):
    assert actions.follow_status(investigation=investigation, status="resolved", because="v ok")
    # A later fact that would mean an earlier status does not overrule it.
    _confirm(investigation, CAUSE, commander)
    investigation.refresh_from_db()
    assert investigation.incident_status == IncidentStatus.RESOLVED
    assert [d["status"] for d in _statuses(investigation)] == ["resolved"]
    assert not actions.follow_status(investigation=investigation, status="monitoring", because="x")


def test_a_commander_sets_it_either_way_with_a_reason_audited(investigation, commander):
    with pytest.raises(ValueError, match="needs a reason"):
        actions.set_status(
            investigation=investigation, status="monitoring", reason=" ", user=commander
        )
    with pytest.raises(ValueError, match="unknown"):
        actions.set_status(investigation=investigation, status="done", reason="x", user=commander)
    with pytest.raises(ValueError, match="already"):
        actions.set_status(
            investigation=investigation, status="investigating", reason="x", user=commander
        )
    actions.set_status(
        investigation=investigation, status="monitoring", reason="mitigated", user=commander
    )
    actions.set_status(
        investigation=investigation, status="investigating", reason="it came back", user=commander
    )
    # Following goes on from where the commander set it.
    _confirm(investigation, CAUSE, commander)
    investigation.refresh_from_db()
    assert investigation.incident_status == IncidentStatus.IDENTIFIED
    assert [(d["status"], d["automatic"]) for d in _statuses(investigation)] == [
        ("monitoring", False), ("investigating", False), ("identified", True),
    ]  # fmt: skip
    entries = AuditEntry.objects.filter(action="investigation.status").order_by("at", "id")
    assert [(e.actor, e.data["status"], e.data["reason"]) for e in entries] == [
        (commander, "monitoring", "mitigated"), (commander, "investigating", "it came back"),
    ]  # fmt: skip
    assert entries[0].investigation_id == investigation.pk


def test_a_closed_investigation_keeps_its_status(investigation, commander):
    Investigation.objects.filter(pk=investigation.pk).update(status=Investigation.Status.CLOSED)
    with pytest.raises(actions.InvestigationClosed):
        actions.set_status(
            investigation=investigation, status="resolved", reason="x", user=commander
        )
    assert not actions.follow_status(investigation=investigation, status="resolved", because="x")


def test_the_incident_commander_and_team_commanders_set_it_on_the_page(
    investigation, commander, responder, viewer, client_for
):
    url = reverse("investigations:set_status", args=[investigation.pk])
    body = {"status": "identified", "reason": "KV at 94 %"}
    assert client_for(viewer).post(url, body).status_code == 403
    assert client_for(responder).post(url, body).status_code == 403  # not the commander
    page = client_for(responder).get(reverse("investigations:detail", args=[investigation.pk]))
    assert url not in page.content.decode()
    actions.assign_role(
        investigation=investigation, role="commander", username=responder.username,
        reason="end of shift", user=commander,
    )  # fmt: skip
    client = client_for(responder)
    page = client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    assert url in page
    assert client.post(url, body).status_code == 302
    investigation.refresh_from_db()
    assert investigation.incident_status == IncidentStatus.IDENTIFIED
    page = client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    assert 'data-testid="incident-status">Identified' in page


def test_list_pages_show_the_status(investigation, deployment, commander, client_for):
    actions.set_status(investigation=investigation, status="monitoring", reason="x", user=commander)
    actions.set_severity(investigation=investigation, severity="sev2", reason="", user=commander)
    client = client_for(commander)
    for url in (
        reverse("home"),
        reverse("investigations:deployment", args=[deployment.pk]),
        reverse("review:list"),
    ):
        page = client.get(url).content.decode()
        assert 'data-testid="incident-status">Monitoring' in page, url
        assert "SEV2" in page, url
