"""Who may read, edit, export and download: anonymous users are sent to log in, outsiders
see nothing (404), viewers read but never write (403), responders and commanders both."""

from __future__ import annotations

import pytest
from django.core.files.base import ContentFile
from django.urls import reverse

from postmortems import actions
from postmortems.models import ActionItem, Export, PostmortemVersion

ROLES = ["anonymous", "outsider", "viewer", "responder", "commander"]
READ = {"anonymous": 302, "outsider": 404, "viewer": 200, "responder": 200, "commander": 200}
WRITE = {"anonymous": 302, "outsider": 404, "viewer": 403, "responder": 302, "commander": 302}


@pytest.fixture
def incident(deployment, commander):
    """A bare investigation: who may do what does not depend on what it found."""
    from investigations import actions as investigation_actions

    return investigation_actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )


@pytest.fixture
def rows(incident, commander, media):
    item = actions.add_action_item(
        investigation=incident, title="Alert on KV pressure", type="detect", user=commander
    )
    export = Export.objects.create(
        team=incident.team,
        postmortem=item.postmortem,
        format=Export.Format.MARKDOWN,
        status=Export.Status.DONE,
    )
    export.file.save("x.md", ContentFile(b"# Postmortem\n"), save=True)
    return {"item": item, "export": export}


def _client(client, request, role):
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", ["detail", "exports", "download"])
def test_reading(client, request, rows, incident, role, name):
    args = [incident.pk] + ([rows["export"].pk] if name == "download" else [])
    response = _client(client, request, role).get(reverse(f"postmortems:{name}", args=args))
    response.close()  # a download holds its file open until then
    assert response.status_code == READ[role]
    if role == "anonymous":
        assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("edit", {"base_version": 0, "summary": "What happened"}),
        ("add_action", {"title": "Runbook", "type": "mitigate", "owner_text": "SRE"}),
        ("close_action", {}),
        ("export", {"format": "pdf"}),
    ],
)
def test_writing(
    client, request, rows, incident, role, name, data, django_capture_on_commit_callbacks
):
    args = [incident.pk] + ([rows["item"].pk] if name == "close_action" else [])
    before = (
        PostmortemVersion.objects.count(),
        ActionItem.objects.count(),
        ActionItem.objects.filter(status="done").count(),
        Export.objects.count(),
    )
    with django_capture_on_commit_callbacks(execute=False):
        response = _client(client, request, role).post(
            reverse(f"postmortems:{name}", args=args), data
        )
    assert response.status_code == WRITE[role]
    after = (
        PostmortemVersion.objects.count(),
        ActionItem.objects.count(),
        ActionItem.objects.filter(status="done").count(),
        Export.objects.count(),
    )
    assert (after != before) == (WRITE[role] == 302 and role != "anonymous")


def test_an_export_of_another_investigation_is_not_found(
    client_for, commander, rows, incident, deployment
):
    from investigations import actions as investigation_actions

    other = investigation_actions.open_investigation(
        deployment=deployment, symptom="itl-spikes", user=commander
    )
    url = reverse("postmortems:download", args=[other.pk, rows["export"].pk])
    assert client_for(commander).get(url).status_code == 404


@pytest.mark.parametrize("name", ["edit", "add_action", "export"])
def test_writes_refuse_get(client_for, commander, incident, name):
    response = client_for(commander).get(reverse(f"postmortems:{name}", args=[incident.pk]))
    assert response.status_code == 405
