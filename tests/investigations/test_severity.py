"""Severity SEV1-SEV4: definitions shown where it is chosen, and every setting is a
timeline event; a change needs a reason."""

from __future__ import annotations

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from investigations import actions
from investigations.choices import SEVERITY_DEFINITIONS, EventKind, Severity
from investigations.models import Investigation, TimelineEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def investigation(deployment, commander):
    return actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)


def test_every_severity_has_a_definition():
    assert [s.label for s in Severity] == ["SEV1", "SEV2", "SEV3", "SEV4"]
    assert set(SEVERITY_DEFINITIONS) == set(Severity)


def test_setting_then_changing_records_both_with_the_reason(investigation, responder):
    actions.set_severity(investigation=investigation, severity="sev3", reason="", user=responder)
    with pytest.raises(ValueError, match="needs a reason"):
        actions.set_severity(
            investigation=investigation, severity="sev1", reason=" ", user=responder
        )
    actions.set_severity(
        investigation=investigation, severity="sev1", reason="all replicas OOM", user=responder
    )
    investigation.refresh_from_db()
    assert investigation.severity == Severity.SEV1
    events = TimelineEvent.objects.filter(investigation=investigation, kind=EventKind.SEVERITY)
    assert [e.data for e in events.order_by("at", "id")] == [
        {"severity": "sev3", "previous": "", "reason": ""},
        {"severity": "sev1", "previous": "sev3", "reason": "all replicas OOM"},
    ]
    assert events.get(data__severity="sev1").summary == "Severity SEV1 (was SEV3): all replicas OOM"


def test_every_setting_is_audited_with_who_and_why(investigation, responder):
    actions.set_severity(investigation=investigation, severity="sev3", reason="", user=responder)
    actions.set_severity(
        investigation=investigation, severity="sev2", reason="error rate x4", user=responder
    )
    entries = AuditEntry.objects.filter(action="investigation.severity").order_by("at", "id")
    assert [(e.actor, e.investigation_id, e.data) for e in entries] == [
        (responder, investigation.pk, {"severity": "sev3", "previous": "", "reason": ""}),
        (
            responder,
            investigation.pk,
            {"severity": "sev2", "previous": "sev3", "reason": "error rate x4"},
        ),
    ]
    assert entries[1].summary == "Severity SEV2 (was SEV3): error rate x4"


def test_unknown_same_or_closed_is_refused(investigation, commander):
    with pytest.raises(ValueError, match="unknown"):
        actions.set_severity(investigation=investigation, severity="sev0", reason="", user=None)
    actions.set_severity(investigation=investigation, severity="sev2", reason="", user=None)
    with pytest.raises(ValueError, match="already"):
        actions.set_severity(investigation=investigation, severity="sev2", reason="x", user=None)
    Investigation.objects.filter(pk=investigation.pk).update(status=Investigation.Status.CLOSED)
    with pytest.raises(actions.InvestigationClosed):
        actions.set_severity(investigation=investigation, severity="sev1", reason="x", user=None)


def test_the_page_shows_definitions_and_the_form_by_role(
    investigation, responder, viewer, client_for
):
    url = reverse("investigations:detail", args=[investigation.pk])
    client = client_for(responder)
    response = client.post(
        reverse("investigations:set_severity", args=[investigation.pk]), {"severity": "sev2"}
    )
    assert response.status_code == 302
    page = client.get(url).content.decode()
    assert 'data-testid="severity">SEV2' in page
    assert SEVERITY_DEFINITIONS[Severity.SEV1] in page and 'name="severity"' in page
    page = client_for(viewer).get(url).content.decode()
    assert SEVERITY_DEFINITIONS[Severity.SEV4] in page and 'name="severity"' not in page
