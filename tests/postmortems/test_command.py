"""The postmortem shows the severity, the status history and the roles, built from the
stored record (the investigation's fields and its typed timeline events), so a closed
postmortem says who commanded, who took over and why, and how the incident was graded."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest

from investigations import actions
from investigations.models import Investigation
from postmortems.markdown import render_markdown
from postmortems.record import load_document
from tests.postmortems.conftest import need_poppler, need_weasyprint
from tests.postmortems.test_frozen import URL, _renders

pytestmark = pytest.mark.django_db


@pytest.fixture
def scribe(django_user_model, team):
    from teams.models import Membership, Role

    user = django_user_model.objects.create_user(username="sam-scribe", password="x" * 20)
    Membership.objects.create(team=team, user=user, role=Role.RESPONDER)
    return user


@pytest.fixture
def commanded(open_incident, commander, responder, scribe, t0, frozen_now, time_machine):
    """The open incident graded, staffed and handed over, then closed."""
    inv = open_incident
    actions.set_severity(investigation=inv, severity="sev3", reason="", user=responder)
    actions.set_severity(
        investigation=inv, severity="sev2", reason="p95 TTFT x3 for all tenants", user=commander
    )
    for role, who in (("scribe", scribe), ("comms_lead", responder), ("responder", scribe)):
        actions.assign_role(
            investigation=inv, role=role, username=who.username, reason="", user=commander
        )
    actions.assign_role(
        investigation=inv, role="commander", username=responder.username,
        reason="Cora's shift ended", user=commander,
    )  # fmt: skip
    time_machine.move_to(t0 + timedelta(minutes=35), tick=False)
    actions.close_investigation(investigation=inv, user=responder)
    time_machine.move_to(frozen_now, tick=False)
    return Investigation.objects.get(pk=inv.pk)


def test_the_document_carries_severity_status_history_and_roles(commanded):
    doc = load_document(commanded)
    assert doc["severity"]["current"] == "SEV2"
    changes = doc["severity"]["changes"]
    assert [(c["severity"], c["previous"], c["reason"], c["actor"]) for c in changes] == [
        ("SEV3", "", "", "remi-responder"),
        ("SEV2", "SEV3", "p95 TTFT x3 for all tenants", "cora-commander"),
    ]  # fmt: skip
    assert doc["incident_status"]["current"] == "Resolved"
    assert [
        (c["status"], c["previous"], c["automatic"]) for c in doc["incident_status"]["changes"]
    ] == [
        ("Identified", "Investigating", True),
        ("Monitoring", "Identified", True),
        ("Resolved", "Monitoring", True),
    ]
    roles = doc["roles"]
    assert roles["commander"] == "remi-responder"
    assert roles["current"] == [
        {"role": "Incident commander", "names": ["remi-responder"]},
        {"role": "Scribe", "names": ["sam-scribe"]},
        {"role": "Communications lead", "names": ["remi-responder"]},
        {"role": "Responder", "names": ["sam-scribe"]},
    ]
    assert [(h["role"], h["op"], h["who"], h["previous"]) for h in roles["history"]] == [
        ("Incident commander", "opened", "cora-commander", ""),
        ("Scribe", "assign", "sam-scribe", ""),
        ("Communications lead", "assign", "remi-responder", ""),
        ("Responder", "assign", "sam-scribe", ""),
        ("Incident commander", "handover", "remi-responder", "cora-commander"),
    ]


def test_html_and_markdown_show_them_and_the_close_freezes_them(commanded, commander, scribe):
    html, md = _renders(commanded)
    assert 'data-testid="pm-severity">SEV2<' in html
    assert 'data-testid="pm-status">Resolved<' in html
    assert 'data-testid="pm-commander">remi-responder<' in html
    assert "handed over from cora-commander" in html and "Cora&#x27;s shift ended" in html
    assert "- **Severity:** SEV2" in md and "- **Status:** Resolved" in md
    assert "- **Incident commander:** remi-responder" in md
    assert "## Severity, status and roles" in md
    assert "| SEV2 | SEV3 | cora-commander | p95 TTFT x3 for all tenants |" in md
    assert (
        "| Monitoring | Identified | followed the record | fix fewer-max-num-seqs recorded |" in md
    )
    assert "| Incident commander | handed over from cora-commander | remi-responder |" in md
    # Closed: nothing can re-grade, re-staff or move it, and the document stays as it was.
    common = {"investigation": commanded, "reason": "x", "user": commander}
    with pytest.raises(actions.InvestigationClosed):
        actions.set_severity(severity="sev1", **common)
    with pytest.raises(actions.InvestigationClosed):
        actions.set_status(status="monitoring", **common)
    with pytest.raises(actions.InvestigationClosed):
        actions.assign_role(role="commander", username=scribe.username, **common)
    assert _renders(commanded) == (html, md)
    assert render_markdown(load_document(commanded, investigation_url=URL)) == md


@pytest.mark.slow
def test_the_pdf_shows_them(commanded):
    need_poppler()
    pdf = need_weasyprint()
    data = pdf.render_pdf(load_document(commanded))
    text = subprocess.run(
        ["pdftotext", "-layout", "-", "-"], input=data, check=True, capture_output=True
    ).stdout.decode()
    text = " ".join(text.split())
    assert "Severity, status and roles" in text
    # The header (its "Incident commander" label wraps in the facts column).
    assert "Severity SEV2 Status Resolved Incident remi-responder" in text
    assert "Status history" in text and "handed over" in text  # table cells wrap in the PDF
    assert "p95 TTFT x3 for all tenants" in text and "Cora's shift ended" in text


def test_the_poll_cycle_resolves_the_status_when_the_fix_verifies(open_incident, t0, time_machine):
    """The status follows the verification the poll cycle reports (here the storm ended
    a minute after the fix): monitoring -> resolved, an automatic event, not audited."""
    from audit.models import AuditEntry
    from investigations.cycle import evaluate_after_poll
    from investigations.models import TimelineEvent

    assert open_incident.incident_status == "monitoring"
    audited = AuditEntry.objects.count()
    at = t0 + timedelta(minutes=35)
    time_machine.move_to(at, tick=False)
    evaluate_after_poll(open_incident.deployment_id, at)
    inv = Investigation.objects.get(pk=open_incident.pk)
    assert inv.incident_status == "resolved" and inv.status == "open"
    verification = TimelineEvent.objects.get(investigation=inv, kind="verification")
    assert verification.data["state"] == "passing"
    status = TimelineEvent.objects.filter(investigation=inv, kind="status").latest("pk")
    assert status.data == {
        "status": "resolved", "previous": "monitoring", "automatic": True,
        "reason": "verification of fewer-max-num-seqs passing",
    }  # fmt: skip
    assert AuditEntry.objects.count() == audited
