"""The Alertmanager webhook, the JSON API and artifact uploads under a fuzzer.

Property: whatever body, query or file name a token holder sends, the answer is a JSON
error with a 4xx status or the documented success, never a 500; what is stored is bounded
(titles, labels, names) and no upload over the limit leaves a row or a file behind.
Requests go through Django's full stack (middleware, URL routing, views, the database).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from django.urls import reverse
from hypothesis import example, given
from hypothesis import strategies as st

from artifacts.models import Artifact
from investigations import actions
from investigations.models import Decision, Investigation
from investigations.tokens import create_token
from tests.trust.conftest import fuzz_settings, json_values, mutated

pytestmark = pytest.mark.django_db

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
OPEN_SEED = {"symptom": "gpu-oom", "deployment": "atlas-prod", "title": "<svg onload=alert(1)>"}
DECISION_SEED = {"node": "kv-block-leak", "action": "eliminate", "reason": "blocks freed: 4 ms"}
UPLOAD_SEED = b'{"traceEvents": []}'
NESTED = (b"[" * 100_000, b'{"alerts":' + b"[" * 50_000, b'{"a":' * 20_000 + b"1")


@pytest.fixture
def token(team, commander):
    return create_token(team=team, name="fuzz", user=commander)[1]


def _post(client, url: str, body: bytes, token: str, content_type: str = "application/json"):
    return client.post(
        url, data=body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def _answered(response, allowed: set[int]) -> dict:
    assert response.status_code in allowed, (response.status_code, response.content[:300])
    body = response.json()
    assert isinstance(body, dict)
    if response.status_code >= 400:
        assert isinstance(body["error"], str) and body["error"]
    return body


def _alert(draw) -> dict:
    """One alert with hostile values in the places Alertmanager fills in."""
    labels = draw(
        st.dictionaries(
            st.sampled_from(["alertname", "atlas_deployment", "atlas_symptom", "severity"])
            | st.text(max_size=300),
            st.sampled_from(["AtlasHighTTFT", "atlas-prod", "gpu-oom", "itl-spikes"])
            | json_values(),
            max_size=6,
        )
    )
    alert = {"labels": labels}
    for key, values in (
        ("status", st.sampled_from(["firing", "resolved"]) | json_values()),
        ("annotations", st.dictionaries(st.just("summary"), st.text(max_size=500) | json_values())),
        ("fingerprint", st.text(max_size=100) | json_values()),
        ("startsAt", json_values()),
    ):
        if draw(st.booleans()):
            alert[key] = draw(values)
    return alert


@pytest.mark.slow
@fuzz_settings(120)
@given(data=st.data())
@example(data=None)
def test_the_alertmanager_webhook_answers_every_payload_without_a_500(
    client, deployment, token, data
):
    url = reverse("api:alertmanager")
    if data is None:
        bodies = [*NESTED, b"", b"\xff\xfe", b"null", b"[]", b'{"alerts": {}}']
    elif data.draw(st.booleans()):
        payload = {"status": data.draw(st.sampled_from(["firing", "resolved"]) | json_values())}
        payload["alerts"] = data.draw(st.lists(st.builds(dict) | json_values(), max_size=2))
        payload["alerts"] += [_alert(data.draw) for _ in range(data.draw(st.integers(0, 3)))]
        bodies = [json.dumps(payload).encode()]
    else:
        seed = json.dumps(ALERT).encode()
        bodies = [data.draw(mutated((seed,), (b"{", b"[", b'"', b"null", b"1e999", b"\\u0000")))]
    if data is None:  # the unmutated alert: opened, with the fingerprint it carried
        answer = _answered(_post(client, url, json.dumps(ALERT).encode(), token), {200})
        assert len(answer["opened"]) == 1, answer
        opened = Investigation.objects.get(pk=answer["opened"][0])
        assert (opened.alert_fingerprint, opened.deployment) == ("f3a1c0ffee", deployment)
    for body in bodies:
        answer = _answered(_post(client, url, body, token), {200, 400})
        for pk in answer.get("opened", []):
            opened = Investigation.objects.get(pk=pk)
            assert len(opened.title) <= 200 and len(opened.alert_fingerprint) <= 64


@fuzz_settings(60)
@given(
    body=st.dictionaries(st.sampled_from(["symptom", "deployment", "title", "x"]), json_values())
)
@example(body=OPEN_SEED)
def test_opening_an_investigation_over_the_api_answers_every_body(client, deployment, token, body):
    answer = _answered(
        _post(client, reverse("api:open"), json.dumps(body).encode(), token), {201, 400}
    )
    if body == OPEN_SEED:  # the unmutated body: opened, the title kept as the text it was
        assert "error" not in answer, answer
        opened = Investigation.objects.get(pk=answer["id"])
        assert (opened.symptom, opened.title) == ("gpu-oom", OPEN_SEED["title"])


@fuzz_settings(60)
@given(body=st.dictionaries(
    st.sampled_from(["node", "action", "reason", "expected_state"]), json_values()))  # fmt: skip
@example(body=DECISION_SEED)
def test_decisions_over_the_api_answer_every_body(client, deployment, token, commander, body):
    found = actions.open_investigation(deployment=deployment, symptom="gpu-oom", user=commander)
    url = reverse("api:decisions", args=[found.pk])
    response = _post(client, url, json.dumps(body).encode(), token)
    _answered(response, {201, 400, 409})
    if body == DECISION_SEED:  # the unmutated decision: recorded with its reason
        assert response.status_code == 201, response.content[:300]
        decision = Decision.objects.get(investigation=found)
        assert (decision.node, decision.action, decision.reason) == (
            "kv-block-leak",
            "eliminate",
            DECISION_SEED["reason"],
        )


@pytest.mark.parametrize("body", NESTED)
def test_deeply_nested_json_is_a_400_not_a_500(client, deployment, token, body):
    """Found by the fuzzer: json.loads raises RecursionError (not ValueError) past ~1,000
    levels, which escaped _json_body as a 500 on every token-authenticated endpoint."""
    for name in ("api:alertmanager", "api:open"):
        answer = _answered(_post(client, reverse(name), body, token), {400})
        assert "not JSON" in answer["error"]


# --------------------------------------------------------------------------- uploads

LIMIT = 4096


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.ATLAS_ARTIFACT_MAX_BYTES = LIMIT
    return settings.MEDIA_ROOT


NAMES = st.text(max_size=300) | st.sampled_from(
    ["../../etc/passwd", "..", "/", "\x00", "a\\b\\..\\c", "<img src=x onerror=alert(1)>.json",
     "x" * 5000, "\u202etxt.exe", "COM1", ""]
)  # fmt: skip
KINDS = st.sampled_from(["", "memory-snapshot", "chrome-trace", "gc-log", "core-dump"]) | st.text(
    max_size=20
)


@fuzz_settings(80)
@given(
    body=st.binary(max_size=64) | st.integers(LIMIT - 2, LIMIT + 2).map(lambda n: b"x" * n),
    name=NAMES,
    kind=KINDS,
    multipart=st.booleans(),
)
@example(body=b"x" * (LIMIT + 1), name="big.bin", kind="", multipart=True)
@example(body=b"x" * (LIMIT + 1), name="big.bin", kind="", multipart=False)
@example(body=UPLOAD_SEED, name="trace.json", kind="chrome-trace", multipart=False)
@example(body=UPLOAD_SEED, name="trace.json", kind="chrome-trace", multipart=True)
def test_uploads_are_stored_bounded_or_refused(
    client, media, commander, deployment, token, body, name, kind, multipart
):
    found = actions.open_investigation(deployment=deployment, symptom="gpu-oom", user=commander)
    before = Artifact.objects.count()
    url = reverse("artifacts:api_upload", args=[found.pk])
    if multipart:
        # Built by hand: the test client refuses the odd file names a hostile client sends.
        response = client.post(
            url,
            data=_multipart(body, name, kind),
            content_type=f"multipart/form-data; boundary={BOUNDARY}",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
    else:
        response = client.post(
            f"{url}?name={quote(name, safe='')}&kind={quote(kind, safe='')}",
            data=body,
            content_type="application/octet-stream",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
    answer = _answered(response, {202, 400, 413})
    if body == UPLOAD_SEED and name == "trace.json":  # the unmutated upload: kept byte for byte
        assert response.status_code == 202, answer
        stored = Artifact.objects.get(pk=answer["id"])
        assert (stored.name, Path(stored.file.path).read_bytes()) == ("trace.json", UPLOAD_SEED)
    if response.status_code != 202:
        assert Artifact.objects.count() == before
        return
    stored = Artifact.objects.get(pk=answer["id"])
    assert stored.size_bytes == len(body) <= LIMIT
    assert 0 < len(stored.name) <= 200 and "/" not in stored.name
    assert all(ch.isprintable() for ch in stored.name)
    assert Path(stored.file.path).resolve().is_relative_to(Path(media).resolve())


BOUNDARY = "atlas-fuzz-boundary"


def _multipart(body: bytes, name: str, kind: str) -> bytes:
    head = f'Content-Disposition: form-data; name="file"; filename="{name}"'.encode()
    parts = [
        b"--" + BOUNDARY.encode(), head, b"Content-Type: application/octet-stream", b"", body,
        b"--" + BOUNDARY.encode(), b'Content-Disposition: form-data; name="kind"', b"",
        kind.encode(), b"--" + BOUNDARY.encode() + b"--", b"",
    ]  # fmt: skip
    return b"\r\n".join(parts)


def test_a_multipart_upload_with_a_huge_file_name_is_a_json_400(
    client, media, commander, deployment, token
):
    """Found by the fuzzer: Django's MultiPartParserError (header too large) escaped the API
    view and answered with the HTML error page instead of the API's JSON 400."""
    found = actions.open_investigation(deployment=deployment, symptom="gpu-oom", user=commander)
    response = client.post(
        reverse("artifacts:api_upload", args=[found.pk]),
        data=_multipart(b"x", "x" * 5000, ""),
        content_type=f"multipart/form-data; boundary={BOUNDARY}",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert "multipart" in _answered(response, {400})["error"]
    assert not Artifact.objects.exists()
