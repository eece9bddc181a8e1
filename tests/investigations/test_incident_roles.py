"""Roles per investigation: the opener commands first; commander, scribe and communications
lead are held by one team member at a time (giving command to someone else is a handover,
with a reason), responders by any; each change is a typed timeline event and audited."""

from __future__ import annotations

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from investigations import actions
from investigations.choices import EventKind
from investigations.models import Investigation, RoleAssignment, TimelineEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def investigation(deployment, commander):
    return actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)


@pytest.fixture
def second_responder(django_user_model, team):
    from teams.models import Membership, Role

    user = django_user_model.objects.create_user(username="rita-responder", password="x" * 20)
    Membership.objects.create(team=team, user=user, role=Role.RESPONDER)
    return user


def _assign(investigation, role, who, user, reason=""):
    return actions.assign_role(
        investigation=investigation, role=role, username=who.username, reason=reason, user=user
    )


def _holders(investigation) -> list[tuple[str, str]]:
    rows = RoleAssignment.objects.filter(investigation=investigation, ended_at__isnull=True)
    return sorted(rows.values_list("role", "user_name"))


def _role_events(investigation) -> list[dict]:
    events = TimelineEvent.objects.filter(investigation=investigation, kind=EventKind.ROLE)
    return [e.data for e in events.order_by("at", "pk")]


def test_the_opener_commands_first_and_an_alert_opens_without_a_commander(
    investigation, deployment
):
    assert _holders(investigation) == [("commander", "cora-commander")]
    assert _role_events(investigation) == []  # the opening event says who opened it
    by_alert = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=None, opened_by_text="alert X"
    )
    assert _holders(by_alert) == []


def test_assigning_roles_is_on_the_timeline_and_audited(
    investigation, commander, responder, second_responder
):
    _assign(investigation, "scribe", responder, commander)
    _assign(investigation, "comms_lead", second_responder, commander)
    _assign(investigation, "responder", responder, commander)
    _assign(investigation, "responder", second_responder, commander)
    with pytest.raises(ValueError, match="already"):
        _assign(investigation, "responder", responder, commander)
    # A one-holder role given to someone else ends the previous holder's.
    _assign(investigation, "scribe", second_responder, commander)
    assert _holders(investigation) == [
        ("commander", "cora-commander"),
        ("comms_lead", "rita-responder"),
        ("responder", "remi-responder"),
        ("responder", "rita-responder"),
        ("scribe", "rita-responder"),
    ]
    assert _role_events(investigation)[-1] == {
        "role": "scribe", "user": "rita-responder", "previous": "remi-responder",
        "op": "assign", "reason": "",
    }  # fmt: skip
    entries = AuditEntry.objects.filter(action="investigation.role")
    assert entries.count() == 5 and {e.actor for e in entries} == {commander}
    actions.release_role(
        investigation=investigation, role="responder", username="remi-responder",
        reason="off shift", user=commander,
    )  # fmt: skip
    assert ("responder", "remi-responder") not in _holders(investigation)
    assert _role_events(investigation)[-1]["op"] == "release"
    assert AuditEntry.objects.filter(action="investigation.role").count() == 6
    with pytest.raises(ValueError, match="handed over"):
        actions.release_role(
            investigation=investigation, role="commander", username="cora-commander",
            reason="", user=commander,
        )  # fmt: skip


def test_a_handover_of_command_needs_a_reason_and_is_recorded(
    investigation, commander, responder, client_for
):
    with pytest.raises(ValueError, match="needs a reason"):
        _assign(investigation, "commander", responder, commander)
    assert _holders(investigation) == [("commander", "cora-commander")]  # rolled back
    _assign(investigation, "commander", responder, commander, reason="end of shift")
    assert _holders(investigation) == [("commander", "remi-responder")]
    assert _role_events(investigation) == [
        {"role": "commander", "user": "remi-responder", "previous": "cora-commander",
         "op": "handover", "reason": "end of shift"},
    ]  # fmt: skip
    event = TimelineEvent.objects.get(investigation=investigation, kind=EventKind.ROLE)
    assert event.summary == (
        "Command handed over from cora-commander to remi-responder: end of shift"
    )
    entry = AuditEntry.objects.get(action="investigation.handover")
    assert entry.actor == commander and entry.investigation_id == investigation.pk
    page = client_for(commander).get(reverse("investigations:detail", args=[investigation.pk]))
    assert 'data-testid="incident-commander">remi-responder<' in page.content.decode()


def test_only_responders_and_commanders_of_the_team_hold_roles(
    investigation, commander, viewer, outsider
):
    for who in (viewer, outsider):
        with pytest.raises(ValueError, match="not a responder or commander of this team"):
            _assign(investigation, "responder", who, commander)
    with pytest.raises(ValueError, match="unknown role"):
        actions.assign_role(
            investigation=investigation, role="boss", username="cora-commander",
            reason="", user=commander,
        )  # fmt: skip
    Investigation.objects.filter(pk=investigation.pk).update(status=Investigation.Status.CLOSED)
    with pytest.raises(actions.InvestigationClosed):
        _assign(investigation, "scribe", commander, commander)


def test_the_page_assigns_by_role_and_the_incident_commander_may_hand_over(
    investigation, commander, responder, second_responder, viewer, client_for
):
    url = reverse("investigations:assign_role", args=[investigation.pk])
    scribe = {"role": "scribe", "username": second_responder.username}
    assert client_for(viewer).post(url, scribe).status_code == 403
    assert client_for(responder).post(url, scribe).status_code == 403
    client = client_for(commander)
    assert client.post(url, scribe).status_code == 302
    handover = {"role": "commander", "username": responder.username, "reason": "sleep"}
    assert client.post(url, handover).status_code == 302
    # The new incident commander (a team responder) hands over in turn.
    client = client_for(responder)
    page = client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    assert url in page and 'data-testid="incident-roles"' in page
    back = {"role": "commander", "username": second_responder.username, "reason": "rested"}
    assert client.post(url, back).status_code == 302
    release = {"op": "release", "role": "scribe", "username": second_responder.username}
    assert client.post(url, release).status_code == 403  # no longer the commander
    assert _holders(investigation) == [
        ("commander", "rita-responder"), ("scribe", "rita-responder"),
    ]  # fmt: skip
    assert [d["op"] for d in _role_events(investigation)] == ["assign", "handover", "handover"]


def test_the_migration_gives_older_records_a_status_and_their_opener_command(deployment, commander):
    import importlib

    from django.apps import apps

    from investigations.models import FixRecord

    migration = importlib.import_module("investigations.migrations.0015_incident_status_and_roles")
    closed, fixed, by_alert = (
        Investigation.objects.create(
            team=deployment.team, deployment=deployment, symptom="high-ttft", **fields
        )
        for fields in (
            {"opened_by": commander, "status": Investigation.Status.CLOSED},
            {"opened_by": commander},
            {"opened_by_name": "alert X"},
        )
    )
    FixRecord.objects.create(investigation=fixed, node="kv-cache-pressure", key="k")
    migration.backfill(apps, None)
    statuses = {i.pk: i.incident_status for i in Investigation.objects.all()}
    assert [statuses[i.pk] for i in (closed, fixed, by_alert)] == [
        "resolved", "monitoring", "investigating",
    ]  # fmt: skip
    assert _holders(closed) == _holders(fixed) == [("commander", "cora-commander")]
    assert _holders(by_alert) == []
