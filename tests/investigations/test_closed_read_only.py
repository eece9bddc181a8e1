"""A closed investigation is read-only (issue 19.10): its record was frozen at the close
and the postmortem is rendered from it, so decisions (web and API), fixes and artifacts
(uploads and collection) are refused with a clear message, and the page shows no decide
forms. Before the fix each of these was accepted and the closed page offered the forms.
"""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from artifacts.models import Artifact
from investigations import actions
from investigations.models import Decision, Investigation
from investigations.tokens import create_token

DECIDE_FORM = 'class="inline decide"'
CLOSED = "this investigation is closed"


@pytest.fixture
def investigation(deployment, commander):
    return actions.open_investigation(deployment=deployment, symptom="itl-spikes", user=commander)


def _close(investigation, commander) -> Investigation:
    actions.close_investigation(investigation=investigation, user=commander, override="done")
    investigation.refresh_from_db()
    assert investigation.status == Investigation.Status.CLOSED
    return investigation


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.mark.django_db
def test_the_closed_page_shows_no_decide_forms(client_for, commander, investigation):
    client = client_for(commander)
    detail = reverse("investigations:detail", args=[investigation.pk])
    tree = reverse("investigations:tree", args=[investigation.pk])
    assert DECIDE_FORM in client.get(detail).content.decode()  # open: the forms are there
    _close(investigation, commander)
    for url in (detail, tree):
        page = client.get(url)
        assert page.status_code == 200
        assert DECIDE_FORM not in page.content.decode(), url


@pytest.mark.django_db
def test_a_web_decision_on_a_closed_investigation_is_refused(client_for, commander, investigation):
    _close(investigation, commander)
    response = client_for(commander).post(
        reverse("investigations:decide", args=[investigation.pk]),
        {"node": "gc-pauses", "action": "eliminate", "reason": "late", "expected_state": "open"},
    )
    assert response.status_code == 302
    assert any(CLOSED in m for m in _messages(response)), _messages(response)
    assert not Decision.objects.filter(investigation=investigation).exists()


@pytest.mark.django_db
def test_an_api_decision_on_a_closed_investigation_is_409(client, team, commander, investigation):
    token = create_token(team=team, name="bot", user=commander)[1]
    _close(investigation, commander)
    response = client.post(
        reverse("api:decisions", args=[investigation.pk]),
        data={"node": "gc-pauses", "action": "eliminate", "reason": "late"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 409, response.content
    assert CLOSED in response.json()["error"]
    assert not Decision.objects.filter(investigation=investigation).exists()


@pytest.mark.django_db
def test_the_action_itself_refuses_so_no_door_is_left_open(commander, investigation):
    _close(investigation, commander)
    with pytest.raises(actions.InvestigationClosed):
        actions.decide(
            investigation=investigation, node="gc-pauses", action="eliminate",
            reason="automation", user=None, evidence={}, automatic=True,
        )  # fmt: skip


@pytest.mark.django_db
def test_uploads_to_a_closed_investigation_are_refused(
    client_for, client, team, commander, investigation
):
    from django.core.files.uploadedfile import SimpleUploadedFile

    _close(investigation, commander)
    web = client_for(commander).post(
        reverse("artifacts:upload", args=[investigation.pk]),
        {"file": SimpleUploadedFile("gc.log", b"gc: collecting generation 0...\n")},
    )
    assert web.status_code == 302
    assert any(CLOSED in m for m in _messages(web)), _messages(web)
    collect = client_for(commander).post(reverse("artifacts:collect", args=[investigation.pk]))
    assert any(CLOSED in m for m in _messages(collect)), _messages(collect)
    token = create_token(team=team, name="bot", user=commander)[1]
    api = client.post(
        reverse("artifacts:api_upload", args=[investigation.pk]) + "?name=gc.log",
        data=b"gc: collecting generation 0...\n",
        content_type="application/octet-stream",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert api.status_code == 409, api.content
    assert CLOSED in api.json()["error"]
    assert not Artifact.objects.exists()


@pytest.mark.django_db
def test_an_upload_racing_the_close_is_refused_by_the_store(deployment, commander, investigation):
    """The caller's copy still says open; the store reads the status now."""
    from artifacts import actions as artifact_actions
    from artifacts.models import Source

    stale = Investigation.objects.get(pk=investigation.pk)
    _close(investigation, commander)
    with pytest.raises(artifact_actions.ClosedInvestigation):
        artifact_actions.store(
            deployment=deployment, investigation=stale, chunks=[b"x\n"], name="gc.log",
            source=Source.UPLOAD,
        )  # fmt: skip
    assert not Artifact.objects.exists()
