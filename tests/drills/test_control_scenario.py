"""enginesim's POST /control/scenario: a redeploy in place, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from enginesim.deployment import Deployment, SimClock
from enginesim.server import MAX_BODY, MAX_SCENARIO_BODY, SimServer


@pytest.fixture
def sim() -> Iterator[SimServer]:
    server = SimServer(
        Deployment("healthy", replicas=2, fmt="sglang", clock=SimClock("manual"))
    ).start_in_thread()
    yield server
    server.stop()


def call(server: SimServer, method: str, path: str, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["main"], timeout=30)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data.strip() else None
    finally:
        conn.close()


def test_switching_rebuilds_the_deployment_keeping_format_replicas_and_clock_mode(sim):
    call(sim, "POST", "/control/advance?seconds=120")
    before = sim.d.epoch_unix
    status, truth = call(sim, "POST", "/control/scenario", b'{"scenario": "gc-pauses", "seed": 9}')
    assert status == 200
    assert (truth["scenario"], truth["causes"], truth["seed"]) == ("gc-pauses", ["gc-pauses"], 9)
    assert (truth["format"], truth["replicas"], truth["sim_time_s"]) == ("sglang", 2, 0.0)
    assert sim.d.epoch_unix == before + 120  # wall timestamps keep increasing
    assert call(sim, "GET", "/control/truth")[1]["scenario"] == "gc-pauses"
    # Still a manual clock on the same port, and the new engines answer.
    assert call(sim, "POST", "/control/advance?seconds=30")[1]["sim_time_s"] == 30
    assert call(sim, "GET", "/")[1]["scenario"] == "gc-pauses"
    assert call(sim, "GET", "/replicas/1/load")[0] == 200
    # Without a seed the deployment keeps its own; a pair is a scenario too.
    status, truth = call(sim, "POST", "/control/scenario", b'{"scenario": "kv-pressure+gc-pauses"}')
    assert status == 200
    assert (truth["seed"], set(truth["causes"])) == (9, {"kv-cache-pressure", "gc-pauses"})


def _prompt_tokens(server: SimServer) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", server.ports["main"], timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sglang:prompt_tokens_total"
    )


def test_the_new_engines_serve_metrics_from_zero_like_a_redeploy(sim):
    call(sim, "POST", "/control/advance?seconds=60")
    assert _prompt_tokens(sim) > 0
    call(sim, "POST", "/control/scenario", b'{"scenario": "kv-pressure"}')
    assert _prompt_tokens(sim) == 0
    assert sim.d.engines[0].cfg.max_num_seqs == 40  # the kv-pressure engine
    call(sim, "POST", "/control/advance?seconds=60")
    assert _prompt_tokens(sim) > 0


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"scenario": "no-such"}', "unknown scenario 'no-such'"),
        (b'{"scenario": "gc-pauses+a+b"}', "at most two scenarios"),
        (b"{not json", "body must be JSON"),
        (b"", "body must be JSON"),
        (b'["gc-pauses"]', "body must be"),
        (b'{"scenario": 3}', "body must be"),
        (b'{"scenario": "gc-pauses", "seed": "7"}', "seed must be an integer"),
        (b'{"scenario": "gc-pauses", "seed": true}', "seed must be an integer"),
        (b'{"scenario": "' + b"x" * MAX_SCENARIO_BODY + b'"}', "body larger than"),
    ],
)
def test_bad_requests_are_400_with_a_clear_error_and_change_nothing(sim, body, error):
    status, out = call(sim, "POST", "/control/scenario", body)
    assert status == 400
    assert error in out["error"]
    assert call(sim, "GET", "/control/truth")[1]["scenario"] == "healthy"


def test_an_unknown_name_lists_the_scenarios(sim):
    status, out = call(sim, "POST", "/control/scenario", b'{"scenario": "no-such"}')
    assert status == 400 and "gc-pauses" in out["scenarios"]


def test_get_is_refused_and_an_oversized_body_is_cut_off_by_the_server_bound(sim):
    assert call(sim, "GET", "/control/scenario")[0] == 405
    huge = b'{"scenario": "' + b"x" * MAX_BODY + b'"}'
    conn = http.client.HTTPConnection("127.0.0.1", sim.ports["main"], timeout=30)
    try:
        conn.request("POST", "/control/scenario", body=huge)
        assert conn.getresponse().status == 413
    finally:
        conn.close()
    assert call(sim, "GET", "/control/truth")[1]["scenario"] == "healthy"
