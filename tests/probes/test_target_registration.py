"""Only commanders decide where probes connect; bad targets are refused with a reason."""

from __future__ import annotations

import pytest
from django.urls import reverse

from probes.models import Target, TargetKind


@pytest.fixture(autouse=True)
def private_networks_allowed(settings):
    """The engines here live on 10.0.0.0/8, as in the compose file's allow-list."""
    from probes.net import parse_networks

    settings.ATLAS_PROBE_ALLOWED_NETWORKS = parse_networks(["127.0.0.0/8", "10.0.0.0/8"])


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


# Every spelling here is refused by the connection guard at each poll; registration refuses
# it now, with the guard's reason (issue 19.13). Legacy IPv4 spellings are what
# getaddrinfo reads as numeric, so they are judged as the address they are.
REFUSED_AT_REGISTRATION = [
    ("http://169.254.169.254/latest/meta-data/", "link-local, metadata"),
    ("http://[fd00:ec2::254]/", "link-local, metadata"),
    ("http://168.63.129.16/machine", "link-local, metadata"),
    ("http://100.100.100.200/latest/meta-data", "link-local, metadata"),
    ("http://[::ffff:169.254.169.254]/", "link-local, metadata"),
    ("http://[fe80::1]:8000/metrics", "link-local, metadata"),
    ("http://0.0.0.0:8000/metrics", "link-local, metadata"),
    ("http://192.168.1.20:8000/metrics", "outside the allowed networks"),
    ("http://172.17.0.2:8000/metrics", "outside the allowed networks"),
    ("http://[fd12:3456::1]:8000/metrics", "outside the allowed networks"),
    ("http://metadata.google.internal/computeMetadata/v1/", "cloud metadata service"),
]


@pytest.mark.parametrize(("url", "message"), REFUSED_AT_REGISTRATION)
def test_blocked_addresses_are_refused_at_registration(
    client_for, commander, deployment, url, message
):
    response = _add(client_for(commander), deployment, kind=TargetKind.ENGINE, url=url)
    assert response.status_code == 400, url
    assert message in response.content.decode()
    assert not Target.objects.exists()


@pytest.mark.parametrize(
    "host", ["2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "[fe80::1%25eth0]"]
)
def test_odd_spellings_of_a_blocked_address_are_refused_before_any_connection(host):
    """Django's URL field refuses most of these first; the form's own check must not
    depend on that, so it is exercised directly."""
    from probes.net import FetchPolicy, ProbeError, check_registered_url

    with pytest.raises(ProbeError) as caught:
        check_registered_url(f"http://{host}/latest/meta-data/", FetchPolicy())
    # httpx itself refuses the octal-dotted form as a URL; the others reach the guard.
    assert caught.value.kind in {"blocked-address", "bad-url"}, caught.value


def test_a_name_is_left_to_the_connection_guard(client_for, commander, deployment):
    """Names are resolved at each connection (DNS can change), not at registration."""
    response = _add(
        client_for(commander), deployment, kind=TargetKind.ENGINE, url="http://engine-0.atlas.internal:8000/metrics"
    )  # fmt: skip
    assert response.status_code == 302
