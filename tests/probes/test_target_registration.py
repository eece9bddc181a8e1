"""Only commanders decide where probes connect; bad targets are refused with a reason."""

from __future__ import annotations

import pytest
from django.urls import reverse

from probes.models import Target, TargetKind


def _add(client, deployment, **data):
    return client.post(reverse("investigations:add_target", args=[deployment.id]), data)


def test_a_commander_registers_an_engine_target(client_for, commander, deployment):
    response = _add(
        client_for(commander),
        deployment,
        kind=TargetKind.ENGINE,
        url="http://10.0.0.5:8000/metrics",
    )
    assert response.status_code == 302
    assert deployment.targets.get().url == "http://10.0.0.5:8000/metrics"


@pytest.mark.parametrize(
    ("actor", "status"), [("responder", 403), ("viewer", 403), ("outsider", 404)]
)
def test_others_cannot_register_targets(client_for, request, deployment, actor, status):
    response = _add(
        client_for(request.getfixturevalue(actor)),
        deployment,
        kind=TargetKind.ENGINE,
        url="http://127.0.0.1:8000/metrics",
    )
    assert response.status_code == status
    assert not Target.objects.exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "engine", "url": "http://admin:pw@10.0.0.5/metrics"}, "credentials"),
        ({"kind": "engine", "url": ""}, "give its URL"),
        ({"kind": "nvml"}, "Celery queue"),
        ({"kind": "log_file", "host_queue": "gpu-1", "path": "engine.log"}, "absolute path"),
        ({"kind": "prometheus", "url": "javascript:alert(1)"}, "Enter a valid URL"),
    ],
)
def test_bad_targets_are_refused_with_a_reason(client_for, commander, deployment, data, message):
    response = _add(client_for(commander), deployment, **data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Target.objects.exists()


def test_a_commander_can_disable_a_target(client_for, commander, responder, deployment):
    target = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://127.0.0.1:8000/metrics"
    )
    url = reverse("investigations:toggle_target", args=[deployment.id, target.id])
    assert client_for(responder).post(url).status_code == 403
    assert client_for(commander).post(url).status_code == 302
    target.refresh_from_db()
    assert not target.enabled


def test_a_prometheus_target_carries_its_queries(client_for, commander, deployment):
    text = (
        "# router latency\n"
        "router_forward_p95 = histogram_quantile(0.95, sum by (le) "
        "(rate(router_forward_duration_seconds_bucket[5m])))\n"
    )
    response = _add(
        client_for(commander), deployment, kind="prometheus", url="http://10.0.0.9:9090",
        queries_text=text,
    )  # fmt: skip
    assert response.status_code == 302
    queries = deployment.targets.get().queries
    assert list(queries) == ["router_forward_p95"]
    assert queries["router_forward_p95"].startswith("histogram_quantile(0.95")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at least one query"),
        ("Bad-Name = up", "lower-case name"),
        ("a = up\na = up", "defined twice"),
        ("only_a_name", "lower-case name"),
    ],
)
def test_bad_query_lists_are_refused(client_for, commander, deployment, text, message):
    response = _add(
        client_for(commander), deployment, kind="prometheus", url="http://10.0.0.9:9090",
        queries_text=text,
    )  # fmt: skip
    assert response.status_code == 400 and message in response.content.decode()
