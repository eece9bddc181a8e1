"""The JSON API and the Alertmanager webhook: tokens, payload validation, deduplication."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from django.utils import timezone

from investigations.models import ApiToken, Investigation, TimelineEvent
from investigations.tokens import create_token
from tests.support import builders


@pytest.fixture
def token(team, commander):
    return create_token(team=team, name="alertmanager", user=commander)[1]


def _post(client, name, body, token=None, args=(), raw=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    data = raw if raw is not None else json.dumps(body)
    return client.post(
        reverse(f"api:{name}", args=args), data=data, content_type="application/json", **headers
    )


ALERT = {
    "version": "4",
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "AtlasHighTTFT", "atlas_deployment": "atlas-prod"},
            "annotations": {"summary": "p95 TTFT 1.4 s on atlas-prod"},
            "fingerprint": "f3a1c0ffee",
        }
    ],
}


def test_tokens_are_stored_as_digests_only(token):
    row = ApiToken.objects.get()
    assert token.startswith("atl_") and token not in (row.digest, row.prefix)
    assert len(row.digest) == 64


@pytest.mark.parametrize(
    "header", [None, "Bearer atl_wrong", "Basic dXNlcjpwYXNz", "Bearer " + "x" * 500]
)
def test_missing_or_wrong_tokens_are_401(client, deployment, header):
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.post(
        reverse("api:alertmanager"), data=json.dumps(ALERT), content_type="application/json",
        **extra,
    )  # fmt: skip
    assert response.status_code == 401 and "WWW-Authenticate" in response
    assert not Investigation.objects.exists()


def test_a_revoked_token_is_401(client, deployment, token):
    ApiToken.objects.update(revoked_at=timezone.now())
    assert _post(client, "alertmanager", ALERT, token).status_code == 401


def test_an_alert_opens_one_investigation_and_repeats_are_folded_in(client, deployment, token):
    first = _post(client, "alertmanager", ALERT, token).json()
    assert len(first["opened"]) == 1
    second = _post(client, "alertmanager", ALERT, token).json()
    assert second["opened"] == [] and second["deduplicated"] == first["opened"]
    investigation = Investigation.objects.get()
    assert investigation.symptom == "high-ttft" and investigation.alert_fingerprint == "f3a1c0ffee"
    assert investigation.title == "p95 TTFT 1.4 s on atlas-prod"
    assert TimelineEvent.objects.get(kind="alert").data["labels"]["alertname"] == "AtlasHighTTFT"


def test_alerts_that_cannot_be_placed_are_skipped_with_a_reason(client, deployment, token):
    payload = json.loads(json.dumps(ALERT))
    payload["alerts"] += [
        {"status": "firing", "labels": {"alertname": "Unknown", "atlas_deployment": "atlas-prod"}},
        {"status": "firing", "labels": {"alertname": "AtlasGPUOOM", "atlas_deployment": "nope"}},
        {"status": "resolved", "labels": {"alertname": "AtlasGPUOOM"}},
        {"status": "pending", "labels": {"alertname": "AtlasGPUOOM"}},
        {
            "status": "resolved",
            "labels": {"alertname": "AtlasGPUOOM", "atlas_deployment": "atlas-prod"},
        },
    ]
    result = _post(client, "alertmanager", payload, token).json()
    assert [s["reason"] for s in result["skipped"]] == [
        "no symptom for this alert", "unknown atlas_deployment", "unknown atlas_deployment",
        "not firing", "no open investigation",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"alerts": "lots"}', "'alerts' must be a list"),
        ('{"alerts": [' + ",".join(['{"labels": {}}'] * 101) + "]}", "at most 100"),
        ("\xff\xfe", "not JSON"),
    ],
)
def test_malformed_payloads_are_400_with_the_reason(client, deployment, token, raw, message):
    response = _post(client, "alertmanager", None, token, raw=raw)
    assert response.status_code == 400 and message in response.json()["error"]


def test_open_read_and_decide_through_the_api(client, deployment, token):
    created = _post(client, "open", {"deployment": "atlas-prod", "symptom": "itl-spikes"}, token)
    assert created.status_code == 201
    body = created.json()
    assert body["status"] == "open" and body["root_cause"] is None
    assert {h["key"] for h in body["hypotheses"]} >= {"oversized-prefill-chunks", "tp-straggler"}
    got = client.get(
        reverse("api:investigation", args=[body["id"]]), HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert got.status_code == 200 and got.json()["id"] == body["id"]
    decision = {
        "node": "gc-pauses",
        "action": "eliminate",
        "reason": "gc disabled",
        "expected_state": "open",
    }
    assert _post(client, "decisions", decision, token, args=[body["id"]]).status_code == 201
    again = _post(client, "decisions", decision, token, args=[body["id"]])
    assert again.status_code == 409
    bad = dict(decision, node="not-a-node")
    assert _post(client, "decisions", bad, token, args=[body["id"]]).status_code == 400


def test_a_token_never_reaches_another_teams_investigation(
    client, other_team, outsider, deployment, token
):
    theirs = builders.deployment(other_team, "theirs")
    investigation = Investigation.objects.create(
        team=other_team, deployment=theirs, symptom="gpu-oom"
    )
    response = client.get(
        reverse("api:investigation", args=[investigation.id]), HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 404
    opened = _post(client, "open", {"deployment": "theirs", "symptom": "gpu-oom"}, token)
    assert opened.status_code == 400


def test_commanders_manage_tokens_and_others_cannot(client_for, commander, responder, team):
    url = reverse("api:tokens", args=[team.id])
    assert client_for(responder).get(url).status_code == 403
    page = client_for(commander).post(url, {"name": "ci"}).content.decode()
    assert "shown once" in page and "atl_" in page
    row = ApiToken.objects.get(name="ci")
    client_for(commander).post(reverse("api:revoke_token", args=[team.id, row.id]))
    row.refresh_from_db()
    assert row.revoked_at is not None


def _get(client, investigation_id, token):
    response = client.get(
        reverse("api:investigation", args=[investigation_id]), HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_get_returns_what_people_decided_the_fix_and_its_verification(
    client, deployment, token, commander
):
    """Issue 17: the GET showed only the automation's suggestion (root_cause null) after
    a person confirmed the cause and recorded its fix."""
    from investigations import actions

    body = _post(client, "open", {"deployment": "atlas-prod", "symptom": "itl-spikes"}, token)
    investigation = Investigation.objects.get(pk=body.json()["id"])
    node = "oversized-prefill-chunks"
    confirm = {"node": node, "action": "confirm", "reason": "prefill 8k chunks"}
    assert _post(client, "decisions", confirm, token, args=[investigation.pk]).status_code == 201
    actions.decide(
        investigation=investigation, node="gc-pauses", action="eliminate", reason="gc off",
        user=commander, evidence={},
    )  # fmt: skip
    got = _get(client, investigation.pk, token)
    assert got["root_cause"] == node and got["confirmed"] == [node]
    assert got["recorded_fix"] is None and got["verification"] is None
    assert [(d["node"], d["action"], d["by"]) for d in got["decisions"]] == [
        (node, "confirm", "API token alertmanager"), ("gc-pauses", "eliminate", "cora-commander"),
    ]  # fmt: skip
    assert got["decisions"][0]["reason"] == "prefill 8k chunks" and got["decisions"][0]["at"]

    actions.record_fix(
        investigation=investigation, node=node, parameters={"max_num_batched_tokens": 2048},
        user=commander, note="rolled out",
    )  # fmt: skip
    got = _get(client, investigation.pk, token)
    fix = got["recorded_fix"]
    assert (fix["node"], fix["applied_by"], fix["note"]) == (node, "cora-commander", "rolled out")
    assert fix["parameters"] == {"max_num_batched_tokens": 2048}
    assert got["verification"]["state"] == "pending"  # no observations since the fix yet
    assert got["root_cause"] == node and "suggested_root_cause" in got


def test_an_alert_folds_into_an_open_investigation_a_person_opened(
    client, deployment, token, commander
):
    """Issue 17: folding was by fingerprint only, so an alert opened a duplicate beside a
    person's investigation of the same deployment and symptom."""
    from investigations import actions

    manual = actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)
    result = _post(client, "alertmanager", ALERT, token).json()
    assert result["opened"] == [] and result["deduplicated"] == [str(manual.pk)]
    assert Investigation.objects.count() == 1
    event = TimelineEvent.objects.get(kind="alert")
    assert event.summary == "Alert AtlasHighTTFT fired"
    assert event.data["fingerprint"] == "f3a1c0ffee"
    manual.refresh_from_db()
    assert manual.alert_fingerprint == "f3a1c0ffee"
    # Another symptom on the same deployment is another investigation.
    oom = json.loads(json.dumps(ALERT))
    oom["alerts"][0].update(labels={"alertname": "AtlasGPUOOM", "atlas_deployment": "atlas-prod"})
    oom["alerts"][0]["fingerprint"] = "0000beef"
    assert len(_post(client, "alertmanager", oom, token).json()["opened"]) == 1
    # A closed investigation takes nothing: the next alert opens a new one.
    Investigation.objects.filter(pk=manual.pk).update(status=Investigation.Status.CLOSED)
    assert len(_post(client, "alertmanager", ALERT, token).json()["opened"]) == 1


def test_a_resolved_alert_is_a_timeline_event_once(client, deployment, token):
    opened = _post(client, "alertmanager", ALERT, token).json()["opened"][0]
    resolved = json.loads(json.dumps(ALERT))
    resolved["status"] = "resolved"
    resolved["alerts"][0].update(status="resolved", endsAt="2026-12-02T02:30:00Z")
    first = _post(client, "alertmanager", resolved, token).json()
    assert first["resolved"] == [opened] and first["skipped"] == []
    event = TimelineEvent.objects.get(kind="alert")
    assert event.summary == "Alert AtlasHighTTFT resolved"
    assert (event.data["status"], event.data["ends_at"]) == ("resolved", "2026-12-02T02:30:00Z")
    repeat = _post(client, "alertmanager", resolved, token).json()  # Alertmanager repeats
    assert repeat["resolved"] == [] and repeat["deduplicated"] == [opened]
    assert TimelineEvent.objects.filter(kind="alert").count() == 1
    # It fires again, then resolves again: both are on the timeline.
    _post(client, "alertmanager", ALERT, token)
    assert _post(client, "alertmanager", resolved, token).json()["resolved"] == [opened]
    statuses = [e.data["status"] for e in TimelineEvent.objects.filter(kind="alert")]
    assert statuses == ["resolved", "firing", "resolved"]
