"""NUL and lone surrogates where input enters, and one bad alert isolated (issue 19.5).

``\\u0000`` (PostgreSQL) or a lone surrogate ``\\ud800`` (both databases) in an alert's
fingerprint, labels or annotations was a 500 for the whole Alertmanager notification:
Alertmanager retried the batch, the later alerts never opened and the earlier ones
folded twice. The same input gave 500s in API titles and reasons and in web forms.
These run on SQLite here and on PostgreSQL through test_api_text_postgres (and in CI).
"""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from investigations.models import ApiToken, Decision, Investigation, TimelineEvent
from investigations.tokens import create_token

BAD = "\x00\ud800"  # NUL, then a lone high surrogate: valid JSON escapes, not UTF-8
SHOWN = "\ufffd\ufffd"


@pytest.fixture
def token(team, commander):
    return create_token(team=team, name="alertmanager", user=commander)[1]


def _post(client, name, body, token, args=()):
    # json.dumps escapes both as \u0000 and \ud800, as Alertmanager's Go encoder would.
    return client.post(
        reverse(f"api:{name}", args=args),
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def _alert(fingerprint: str, alertname: str = "AtlasHighTTFT", summary: str = "p95 high"):
    return {
        "status": "firing",
        "labels": {"alertname": alertname, "atlas_deployment": "atlas-prod", "pod": "p0"},
        "annotations": {"summary": summary},
        "fingerprint": fingerprint,
    }


NOTIFICATION = {
    "version": "4",
    "status": "firing",
    "alerts": [
        _alert("first"),
        {"status": "firing", "labels": "not an object", "fingerprint": "shapeless"},
        # A symptom of its own each: alerts of one deployment and symptom fold together.
        _alert("nul\x00print", alertname="AtlasThroughputDrop", summary="TTFT\x00 1.4 s"),
        {**_alert("sur\ud800rogate", summary="KV \ud800 full"),
         "labels": {"alertname": "AtlasGPUOOM", "atlas_deployment": "atlas-prod",
                    "gpu\udfff": "0\ud800"}},
        _alert("last", alertname="AtlasITLSpikes"),
    ],
}  # fmt: skip


@pytest.mark.django_db
def test_one_bad_alert_is_reported_and_the_others_are_processed_exactly_once(
    client, deployment, token
):
    response = _post(client, "alertmanager", NOTIFICATION, token)
    assert response.status_code == 200, response.content
    body = response.json()
    assert [f["index"] for f in body["failed"]] == [1]
    assert "labels" in body["failed"][0]["reason"]
    assert len(body["opened"]) == 4 and body["deduplicated"] == []
    fingerprints = set(Investigation.objects.values_list("alert_fingerprint", flat=True))
    assert fingerprints == {"first", "nul\ufffdprint", "sur\ufffdrogate", "last"}
    titles = set(Investigation.objects.values_list("title", flat=True))
    assert {"TTFT\ufffd 1.4 s", "KV \ufffd full"} <= titles
    assert not TimelineEvent.objects.filter(kind="alert").exists()  # nothing folded twice

    again = _post(client, "alertmanager", NOTIFICATION, token).json()  # Alertmanager repeats
    assert len(again["deduplicated"]) == 4 and again["opened"] == []
    assert Investigation.objects.count() == 4
    assert TimelineEvent.objects.filter(kind="alert").count() == 4  # one fold per alert


@pytest.mark.django_db
def test_api_titles_and_reasons_keep_their_text_safely(client, deployment, token):
    created = _post(
        client, "open", {"deployment": "atlas-prod", "symptom": "itl-spikes", "title": "t" + BAD},
        token,
    )  # fmt: skip
    assert created.status_code == 201, created.content
    investigation = Investigation.objects.get(pk=created.json()["id"])
    assert investigation.title == "t" + SHOWN
    decision = {"node": "gc-pauses", "action": "eliminate", "reason": "gc off" + BAD}
    answered = _post(client, "decisions", decision, token, args=[investigation.pk])
    assert answered.status_code == 201, answered.content
    assert Decision.objects.get(investigation=investigation).reason == "gc off" + SHOWN


@pytest.mark.django_db
def test_web_forms_and_searches_take_nul_without_a_500(client_for, commander, team):
    client = client_for(commander)
    # A view that reads request.POST itself (not through a form's CharField).
    response = client.post(reverse("api:tokens", args=[team.pk]), {"name": "ops\x00bot"})
    assert response.status_code == 200
    assert ApiToken.objects.filter(team=team).get().name == "ops\ufffdbot"
    # A search: the query reaches an icontains / full-text lookup.
    assert client.get(reverse("review:list"), {"q": "oom\x00"}).status_code == 200
