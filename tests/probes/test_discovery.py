"""Targets from Prometheus: a real Prometheus (Debian's) scraping the simulator's engine,
dcgm-exporter and router endpoints; hostile answers from a server that says anything; the
selector parsed so that nothing but label matchers reaches ``match[]``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from probes import discovery as d
from probes.models import Target, TargetKind
from probes.net import ProbeError
from probes.policy import fetch_policy
from tests.support.prometheus import prometheus, wait_for_series
from tests.support.static_http import serve

JOBS = (("engine", "/metrics"), ("dcgm", "/dcgm/metrics"), ("router", "/router/metrics"))


# --- the selector -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, rendered",
    [
        ("", ""),
        ('{job="vllm"}', 'job="vllm"'),
        (
            ' job = "a" , ns=~"prod-.*",x!="y\\"z", w!~\'q\' ',
            'job="a", ns=~"prod-.*", x!="y\\"z", w!~\'q\'',
        ),
    ],
)
def test_selectors_are_read_as_label_matchers(text, rendered):
    assert d.selector_text(d.parse_selector(text)) == rendered


@pytest.mark.parametrize(
    "text",
    [
        'job="a"} or vector(1) #',
        'job="a" or up',
        '__name__="up"',
        'job="unterminated',
        "job=a",
        'job="a" job="b"',
        '1job="a"',
        'job="a\nb"',
        ",".join(f'l{i}="x"' for i in range(d.MAX_MATCHERS + 1)),
        'job="' + "x" * d.MAX_SELECTOR_CHARS + '"',
    ],
)
def test_anything_but_matchers_is_refused(text):
    with pytest.raises(ValueError):
        d.parse_selector(text)


def test_each_class_is_one_match_with_the_commanders_matchers():
    matches = d.series_matchers(d.parse_selector('job="x"'))
    assert len(matches) == len(d.CLASSES)
    assert all(m.endswith(', job="x"}') for m in matches)
    assert "vllm:num_requests_running" in matches[0] and "sglang:num_running_reqs" in matches[0]


# --- hostile answers, parsed ---------------------------------------------------------------


@pytest.mark.parametrize(
    "data, kind",
    [
        ({}, "malformed"),
        ([1], "malformed"),
        ([{"__name__": 1}], "malformed"),
        ([{f"l{i}": "x" for i in range(d.MAX_LABELS + 1)}], "malformed"),
        ([{"__name__": "up"}] * (d.MAX_SERIES + 1), "too-large"),
    ],
)
def test_hostile_series_answers_are_errors(data, kind):
    with pytest.raises(ProbeError) as caught:
        d.parse_series(data)
    assert caught.value.kind == kind


def test_series_prometheus_was_not_asked_for_are_ignored_and_labels_clipped():
    counts = d.parse_series(
        [
            {"__name__": "vllm:num_requests_running", "job": "e", "instance": "i" * 5000},
            {"__name__": "vllm:num_requests_running", "job": "e", "instance": "i" * 5000},
            {"__name__": "node_load1", "job": "n", "instance": "h"},
        ]
    )
    assert counts == {("engine", "e", "i" * d.MAX_LABEL_CHARS): 2}


@pytest.mark.parametrize(
    "data",
    [[], {"activeTargets": {}}, {"activeTargets": [1]}, {"activeTargets": [{"scrapeUrl": 5}]}],
)
def test_hostile_target_answers_are_errors(data):
    with pytest.raises(ProbeError):
        d.parse_targets(data)


def test_a_scrape_url_no_probe_could_read_is_listed_but_not_registrable():
    scrapes = d.parse_targets(
        {
            "activeTargets": [
                {"labels": {"job": "e", "instance": "a"}, "scrapeUrl": "file:///etc/passwd"},
                {"labels": {"job": "e", "instance": "b"}, "scrapeUrl": "http://u:p@h/metrics"},
            ]
        }
    )
    assert {s.url for s in scrapes.values()} == {""}
    found = d.instances({("engine", "e", "a"): 1}, scrapes)
    assert d.compare(found, "http://p", []).new == ()


def _instance(cls, job, instance, url=""):
    return d.Instance(cls, job, instance, 1, url, "up", "")


def test_compare_says_new_registered_and_gone():
    found = [
        _instance("engine", "e", "h:1", "http://h:1/metrics"),
        _instance("engine", "e", "h:2", "http://h:2/metrics"),
        _instance("router", "r", "h:3", "http://h:3/router/metrics"),
    ]
    registered = [
        d.Registered(TargetKind.ENGINE, "http://h:1/metrics", "h:1", True),
        d.Registered(TargetKind.ENGINE, "http://h:9/metrics", "h:9", False),  # gone
        d.Registered(TargetKind.PROMETHEUS, "http://p", "h:4", True),  # a router, gone
        d.Registered(TargetKind.PROMETHEUS, "http://other", "h:4", True),  # not this one's
        d.Registered(TargetKind.LOG_FILE, "", "", True),  # not discoverable
    ]
    comparison = d.compare(found, "http://p", registered)
    assert [r.registered for r in comparison.rows] == [True, False, False]
    assert [r.found.instance for r in comparison.new] == ["h:2", "h:3"]
    assert [t.replica for t in comparison.gone] == ["h:9", "h:4"]
    router = comparison.rows[2].spec
    assert (router.kind, router.url, router.replica) == (TargetKind.PROMETHEUS, "http://p", "h:3")
    assert 'job="r", instance="h:3"' in router.queries["router_forward_p95"]


def test_label_values_cannot_break_out_of_the_router_query():
    spec = d.CLASSES[2].register(_instance("router", 'x"} or vector(1) #', "h"), "http://p")
    assert 'job="x\\"} or vector(1) #"' in spec.queries["router_forward_p95"]


@pytest.mark.parametrize(
    "body, kind",
    [
        (b"<html>proxy</html>", "malformed"),
        (json.dumps({"status": "success", "data": {"activeTargets": "x"}}).encode(), "malformed"),
        (
            json.dumps({"status": "error", "errorType": "bad_data", "error": "no"}).encode(),
            "promql-bad_data",
        ),
        (b"[" * 200_000, "malformed"),
    ],
)
def test_hostile_servers_over_real_http_are_probe_errors(body, kind):
    bodies = {"/api/v1/series": json.dumps({"status": "success", "data": []}).encode()}
    bodies["/api/v1/targets"] = body
    with serve(bodies, content_type="application/json") as base, pytest.raises(ProbeError) as e:
        d.discover(base, "", fetch_policy())
    assert e.value.kind == kind


def test_a_base_url_that_steers_the_path_is_refused_before_any_fetch():
    with pytest.raises(ProbeError):
        d.discover("http://127.0.0.1:9/../admin", "", fetch_policy())


# --- a real Prometheus scraping the simulator ----------------------------------------------


@pytest.fixture(scope="module")
def scraped(tmp_path_factory) -> Iterator[tuple[SimServer, str]]:
    sim = SimServer(SimDeployment("healthy", seed=0, clock=SimClock("manual"))).start_in_thread()
    host = f"127.0.0.1:{sim.ports['main']}"
    try:
        with prometheus(tmp_path_factory.mktemp("prom"), host, JOBS) as base:
            for name in ("vllm:num_requests_running", "DCGM_FI_DEV_GPU_UTIL"):
                wait_for_series(base, name)
            wait_for_series(base, "router_forward_duration_seconds_count")
            yield sim, base
    finally:
        sim.stop()


def test_a_real_prometheus_lists_the_engine_exporter_and_router(scraped):
    sim, base = scraped
    found = d.discover(base, "", fetch_policy())
    host = f"127.0.0.1:{sim.ports['main']}"
    by_class = {i.cls: i for i in found.found}
    assert set(by_class) == {"engine", "dcgm", "router"}
    assert by_class["engine"].scrape_url == f"http://{host}/metrics"
    assert by_class["dcgm"].scrape_url == f"http://{host}/dcgm/metrics"
    assert all(i.instance == host and i.health == "up" for i in found.found)
    narrowed = d.discover(base, 'job=~"dcgm|router"', fetch_policy())
    assert [i.cls for i in narrowed.found] == ["dcgm", "router"]
    assert d.discover(base, 'job="nothing"', fetch_policy()).found == ()


@pytest.mark.django_db
def test_the_page_registers_the_chosen_and_rediscovery_shows_them_registered(
    scraped, deployment, client_for, commander
):
    sim, base = scraped
    gone = Target.objects.create(
        deployment=deployment, kind=TargetKind.DCGM, url="http://127.0.0.1:1/metrics"
    )
    url = reverse("discovery:prometheus", args=[deployment.pk])
    client = client_for(commander)
    page = client.post(url, {"step": "discover", "prometheus_url": base, "selector": ""})
    assert page.status_code == 200
    comparison = page.context["comparison"]
    assert [r.found.cls for r in comparison.new] == ["engine", "dcgm", "router"]
    assert [t.url for t in comparison.gone] == [gone.url]
    chosen = [r.found.key for r in comparison.new if r.found.cls != "dcgm"]
    saved = client.post(
        url, {"step": "register", "prometheus_url": base, "selector": "", "chosen": chosen}
    )
    assert saved.status_code == 302
    host = f"127.0.0.1:{sim.ports['main']}"
    assert sorted(deployment.targets.values_list("kind", "url", "replica")) == [
        (TargetKind.DCGM, gone.url, ""),
        (TargetKind.ENGINE, f"http://{host}/metrics", host),
        (TargetKind.PROMETHEUS, base, host),
    ]
    router = deployment.targets.get(kind=TargetKind.PROMETHEUS)
    assert set(router.queries) == {"router_forward_p95"}
    assert AuditEntry.objects.filter(action="target.create").count() == 2

    again = client.post(url, {"step": "discover", "prometheus_url": base, "selector": ""})
    assert [r.found.cls for r in again.context["comparison"].new] == ["dcgm"]
    assert [r.registered for r in again.context["comparison"].rows] == [True, False, True]
    # Registering what is already registered registers nothing.
    twice = client.post(
        url, {"step": "register", "prometheus_url": base, "selector": "", "chosen": chosen}
    )
    assert twice.status_code == 400
    assert deployment.targets.count() == 3


@pytest.mark.django_db
def test_an_unreachable_prometheus_is_said_on_the_page(deployment, client_for, commander):
    url = reverse("discovery:prometheus", args=[deployment.pk])
    page = client_for(commander).post(
        url, {"step": "discover", "prometheus_url": "http://127.0.0.1:9", "selector": ""}
    )
    assert page.status_code == 200
    assert "connect" in page.context["error"]


@pytest.mark.django_db
def test_a_responder_cannot_discover(deployment, client_for, responder):
    url = reverse("discovery:prometheus", args=[deployment.pk])
    assert client_for(responder).get(url).status_code == 403
