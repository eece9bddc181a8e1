"""The Prometheus API client against a real Prometheus scraping the simulator, and against a
fake Prometheus that misbehaves on purpose. Real HTTP only, nothing mocked."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from enginesim.deployment import Deployment, SimClock
from enginesim.server import SimServer
from probes.net import FetchPolicy, ProbeError, guarded_async_client, parse_networks
from probes.promapi import (
    MAX_SERIES,
    QueryResult,
    Series,
    api_url,
    instant_query,
    range_query,
    single_value,
)
from probes.promql import render_promql
from tests.conftest import require_service
from tests.support.hostile import _Handler, hostile_server
from tests.support.processes import spawn_logged

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
POLICY = FetchPolicy(connect_timeout=1, read_timeout=3, total_timeout=4, max_bytes=1 << 20)
EVERYWHERE = FetchPolicy(
    allowed_networks=parse_networks(["0.0.0.0/0", "::/0"]), total_timeout=3, read_timeout=2
)
ROUTER_P95 = (
    "histogram_quantile(0.95, sum by (le) "
    '(rate(router_forward_duration_seconds_bucket{job="${job}"}[${window}])))'
)


def _run(call, policy: FetchPolicy = POLICY):
    """Run ``call(client)`` (a coroutine factory) with a fresh guarded client."""

    async def main():
        async with guarded_async_client(policy) as client:
            return await call(client)

    return asyncio.run(main())


def _error(call, policy: FetchPolicy = POLICY) -> ProbeError:
    with pytest.raises(ProbeError) as caught:
        _run(call, policy)
    return caught.value


# --- a real Prometheus scraping the simulator ---------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LivePrometheus:
    def __init__(self, base: str, ready_at: float) -> None:
        self.base = base
        self.ready_at = ready_at  # unix time at which the router p95 first had a value


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[LivePrometheus]:
    if not os.access(PROMETHEUS, os.X_OK):
        require_service("Prometheus", "binary missing (Debian package `prometheus`)")
    tmp = tmp_path_factory.mktemp("promapi")
    # Prometheus scrapes in real time, so the simulator runs on its realtime clock (20x).
    deployment = Deployment("healthy", replicas=1, seed=0, clock=SimClock("realtime", 20.0))
    sim = SimServer(deployment).start_in_thread()
    target = f"127.0.0.1:{sim.ports['main']}"
    lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "scrape_configs:"]
    for job, path in (("router", "/router/metrics"), ("vllm", "/metrics")):
        lines += [
            f"  - job_name: {job}",
            f"    metrics_path: {path}",
            "    static_configs:",
            f"      - targets: ['{target}']",
        ]
    config = tmp / "prometheus.yml"
    config.write_text("\n".join(lines) + "\n")
    port = _free_port()
    log_path = tmp / "prometheus.log"
    proc = spawn_logged(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        log_path,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        query = render_promql(ROUTER_P95, job="router", window="10s")
        deadline = time.monotonic() + 30
        ready_at = None
        while ready_at is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {log_path.read_text()}")
            try:
                value = single_value(_run(lambda c, q=query: instant_query(c, base, q, POLICY)))
            except ProbeError:
                continue  # not listening yet
            if value is not None and math.isfinite(value):
                ready_at = time.time()
        assert ready_at is not None, "no router p95 from Prometheus within 30 s"
        yield LivePrometheus(base, ready_at)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sim.stop()


@pytest.mark.slow
def test_router_p95_is_one_finite_number(prometheus):
    query = render_promql(ROUTER_P95, job="router", window="10s")
    result = _run(lambda c: instant_query(c, prometheus.base, query, POLICY))
    assert result.result_type == "vector" and len(result.series) == 1
    value = single_value(result)
    assert value is not None and 0.0 < value < 0.02  # healthy router: under the 20 ms bar


@pytest.mark.slow
def test_instant_query_at_a_time_returns_labelled_series(prometheus):
    at = round(prometheus.ready_at, 3)
    result = _run(lambda c: instant_query(c, prometheus.base, "up", POLICY, at=at))
    assert {s.label("job") for s in result.series} == {"router", "vllm"}
    assert all(s.points == ((at, 1.0),) for s in result.series)
    assert all(s.label_dict()["instance"].startswith("127.0.0.1:") for s in result.series)


@pytest.mark.slow
def test_range_query_returns_a_matrix_with_one_point_per_step(prometheus):
    raw = _run(lambda c: instant_query(c, prometheus.base, 'up{job="router"}[5m]', POLICY))
    assert raw.result_type == "matrix" and len(raw.series[0].points) >= 2  # raw samples
    # From the first scrape on, every step has a value (the 5-minute lookback carries it).
    start = raw.series[0].points[0][0]
    end = start + 3.0
    result = _run(
        lambda c: range_query(
            c, prometheus.base, 'up{job="router"}', POLICY, start=start, end=end, step=0.5
        )
    )
    assert result.result_type == "matrix" and len(result.series) == 1
    points = result.series[0].points
    assert [t for t, _ in points] == pytest.approx([start + 0.5 * k for k in range(7)], abs=1e-3)
    assert {v for _, v in points} == {1.0}


@pytest.mark.slow
def test_scalar_and_string_results(prometheus):
    scalar = _run(lambda c: instant_query(c, prometheus.base, "1/0", POLICY))
    assert scalar.result_type == "scalar" and scalar.scalar == math.inf
    assert single_value(scalar) == math.inf
    text = _run(lambda c: instant_query(c, prometheus.base, '"atlas"', POLICY))
    assert (text.result_type, text.string) == ("string", "atlas")


@pytest.mark.slow
def test_bad_promql_is_a_permanent_bad_data_error_with_prometheus_message(prometheus):
    error = _error(lambda c: instant_query(c, prometheus.base, "sum(rate(up[1m])", POLICY))
    assert error.kind == "promql-bad_data" and not error.transient
    assert "parse error" in error.message and "unclosed left parenthesis" in error.message


@pytest.mark.slow
def test_an_execution_error_is_permanent(prometheus):
    query = "label_replace(up, 'x', '$1', 'job', '(.*')"
    error = _error(lambda c: instant_query(c, prometheus.base, query, POLICY))
    assert error.kind == "promql-execution" and not error.transient
    assert "invalid regular expression" in error.message


@pytest.mark.slow
def test_prometheus_own_timeout_is_a_transient_timeout_error(prometheus):
    """11,000 steps cannot be evaluated in 1 ms: Prometheus stops and says so (HTTP 503).

    Each step is a subquery of 1,000 inner steps over ``vector(1)``, which exists whatever
    the server has scraped: over a series with no samples the plain query sometimes
    finished inside the 1 ms and no timeout was raised (seen once in a full run)."""
    end = time.time()
    error = _error(
        lambda c: range_query(
            c, prometheus.base, "count_over_time(vector(1)[1s:1ms])",
            POLICY, start=end - 1100, end=end, step=0.1, timeout_s=0.001,
        )
    )  # fmt: skip
    assert error.kind == "promql-timeout" and error.transient
    assert "timed out" in error.message


@pytest.mark.slow
def test_several_series_are_not_a_single_value(prometheus):
    result = _run(lambda c: instant_query(c, prometheus.base, "up", POLICY))
    with pytest.raises(ProbeError, match="aggregate") as caught:
        single_value(result)
    assert caught.value.kind == "promql-not-single"
    empty = _run(lambda c: instant_query(c, prometheus.base, "up{job='nope'}", POLICY))
    assert single_value(empty) is None


# --- refused before sending ---------------------------------------------------------------

UNREACHABLE = "http://127.0.0.1:9"  # nothing is contacted: every case fails before connecting


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"start": 0, "end": 11_001, "step": 1}, "11,000"),
        ({"start": 0, "end": 60, "step": 0}, "step"),
        ({"start": 60, "end": 0, "step": 1}, "before"),
        ({"start": math.nan, "end": 0, "step": 1}, "finite"),
    ],
)
def test_range_queries_that_cannot_succeed_are_refused_before_sending(kwargs, fragment):
    error = _error(lambda c: range_query(c, UNREACHABLE, "up", POLICY, **kwargs))
    assert error.kind == "bad-query" and fragment in error.message and not error.transient


def test_the_11000_point_limit_itself_is_allowed_through():
    # (end - start) / step == 11,000 is Prometheus's own boundary: sent (and refused by port 9)
    error = _error(lambda c: range_query(c, UNREACHABLE, "up", POLICY, start=0, end=11_000, step=1))
    assert error.kind == "connect"


@pytest.mark.parametrize("promql", ["", "   ", "x" * 4097, "up\0"])
def test_empty_oversized_or_nul_promql_is_refused(promql):
    error = _error(lambda c: instant_query(c, UNREACHABLE, promql, POLICY))
    assert error.kind == "bad-query"


@pytest.mark.parametrize(
    "base",
    [
        "http://127.0.0.1:9090/../admin",
        "http://127.0.0.1:9090/prom/%2e%2e/x",
        "http://127.0.0.1:9090//evil",
        "http://127.0.0.1:9090/prom?x=1",
        "http://127.0.0.1:9090/prom#frag",
        "http://127.0.0.1:9090/pr om",
        "http://127.0.0.1:9090/prom\\..\\x",
        "http://user:pw@127.0.0.1:9090",
        "ftp://127.0.0.1:9090",
        "",
    ],
)
def test_base_urls_with_path_tricks_are_refused(base):
    error = _error(lambda c: instant_query(c, base, "up", POLICY))
    assert error.kind == "bad-url" and not error.transient


def test_the_query_path_is_appended_to_the_base_path():
    assert api_url("http://127.0.0.1:9090", "query") == "http://127.0.0.1:9090/api/v1/query"
    assert api_url("http://gw:9090/prometheus/", "query_range") == (
        "http://gw:9090/prometheus/api/v1/query_range"
    )


def test_a_metadata_base_url_is_blocked():
    error = _error(lambda c: instant_query(c, "http://169.254.169.254", "up", EVERYWHERE))
    assert error.kind == "blocked-address"


# --- a fake Prometheus that misbehaves ----------------------------------------------------


def _json(obj) -> bytes:
    return json.dumps(obj).encode()


def _vector(*samples) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


class _FakePrometheus(_Handler):
    """Routes on the first path segment, so ``<server>/<behaviour>`` works as a base URL
    (the client appends ``/api/v1/query``); the hostile server's faults stay available."""

    def handle(self) -> None:
        try:
            request_line = self.rfile.readline(8192).decode("latin-1")
            while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                pass
            path = request_line.split(" ")[1] if " " in request_line else "/"
            first = path.lstrip("/").split("/")[0].split("?")[0].replace("-", "_")
            getattr(self, "do_" + first, self.do_ok)(path)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, status: str, body: bytes, content_type: str = "application/json") -> None:
        self._head(status, {"Content-Type": content_type}, len(body))
        self.wfile.write(body)

    def do_echo(self, path: str) -> None:
        answer = {"status": "success", "data": {"resultType": "string", "result": [1, path]}}
        self._send("200 OK", _json(answer))

    def do_bad_data(self, path: str) -> None:
        message = 'invalid parameter "query": 1:1: parse error: ' + "x" * 600
        envelope = {"status": "error", "errorType": "bad_data", "error": message}
        self._send("400 Bad Request", _json(envelope))

    def do_unavailable(self, path: str) -> None:
        envelope = {"status": "error", "errorType": "unavailable", "error": "TSDB not ready"}
        self._send("503 Service Unavailable", _json(envelope))

    def do_odd_error(self, path: str) -> None:
        envelope = {"status": "error", "errorType": "mystery", "error": "something odd"}
        self._send("422 Unprocessable Entity", _json(envelope))

    def do_proxy_page(self, path: str) -> None:
        self._send("503 Service Unavailable", b"<html>upstream busy</html>", "text/html")

    def do_specials(self, path: str) -> None:
        answer = _vector(
            {"metric": {"le": "a"}, "value": [1.5, "NaN"]},
            {"metric": {"le": "b"}, "value": [1.5, "+Inf"]},
            {"metric": {"le": "c"}, "value": [1.5, "-Inf"]},
            {"metric": {"le": "d"}, "value": [1.5, "1e-3"]},
        )
        answer["warnings"] = ["PromQL info: metric might not be a counter"]
        self._send("200 OK", _json(answer))

    def do_wrong_shape(self, path: str) -> None:
        answer = {"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}}
        self._send("200 OK", _json(answer))

    def do_bad_value(self, path: str) -> None:
        self._send("200 OK", _json(_vector({"metric": {}, "value": [1, "1_000"]})))

    def do_number_value(self, path: str) -> None:
        self._send("200 OK", _json(_vector({"metric": {}, "value": [1, 5]})))

    def do_bare_nan(self, path: str) -> None:
        self._send("200 OK", b'{"status": "success", "data": {"resultType": "scalar", '
                   b'"result": [NaN, "1"]}}')  # fmt: skip

    def do_deep(self, path: str) -> None:
        self._send("200 OK", b"[" * 200_000 + b"]" * 200_000)

    def do_many_series(self, path: str) -> None:
        sample = {"metric": {}, "value": [1, "1"]}
        self._send("200 OK", _json(_vector(*[sample] * (MAX_SERIES + 1))))

    def do_text(self, path: str) -> None:
        self._send("200 OK", b"# TYPE up gauge\nup 1\n", "text/plain")


@pytest.fixture(scope="module")
def fake():
    with hostile_server(_FakePrometheus) as base:
        yield base


def _instant(base: str, promql: str = "up", policy: FetchPolicy = POLICY, **kw):
    return _run(lambda c: instant_query(c, base, promql, policy, **kw), policy)


def _instant_error(base: str, policy: FetchPolicy = POLICY) -> ProbeError:
    with pytest.raises(ProbeError) as caught:
        _instant(base, policy=policy)
    return caught.value


def test_parameters_are_url_encoded_with_prometheus_own_timeout(fake):
    promql = 'sum(rate(x{job="a b&c=d"}[5m])) # 100%'
    sent = _instant(fake + "/echo/prefix", promql, at=1700000000.25, timeout_s=2).string
    path, _, query = sent.partition("?")
    assert path == "/echo/prefix/api/v1/query"
    assert urllib.parse.parse_qs(query) == {
        "query": [promql], "time": ["1700000000.250"], "timeout": ["2000ms"],
    }  # fmt: skip
    assert "&c=d" not in query and " " not in query


def test_the_server_timeout_defaults_below_the_client_deadline(fake):
    sent = _instant(fake + "/echo").string
    assert urllib.parse.parse_qs(sent.partition("?")[2])["timeout"] == ["3200ms"]  # 0.8 x 4 s
    sent = _instant(fake + "/echo", timeout_s=60).string  # capped: the client gives up at 4 s
    assert urllib.parse.parse_qs(sent.partition("?")[2])["timeout"] == ["3200ms"]


def test_range_parameters(fake):
    sent = _run(
        lambda c: range_query(c, fake + "/echo", "up", POLICY, start=100, end=160.5, step=15)
    ).string
    path, _, query = sent.partition("?")
    assert path == "/echo/api/v1/query_range"
    params = urllib.parse.parse_qs(query)
    assert (params["start"], params["end"], params["step"]) == (
        ["100.000"],
        ["160.500"],
        ["15.000"],
    )


def test_server_message_is_kept_but_truncated(fake):
    error = _instant_error(fake + "/bad-data")
    assert error.kind == "promql-bad_data" and not error.transient
    assert error.message.startswith('invalid parameter "query": 1:1: parse error: xxx')
    assert len(error.message) <= 300 and error.message.endswith("…")


def test_unavailable_is_transient_and_unknown_error_types_are_generic(fake):
    error = _instant_error(fake + "/unavailable")
    assert (error.kind, error.message, error.transient) == (
        "promql-unavailable", "TSDB not ready", True,
    )  # fmt: skip
    error = _instant_error(fake + "/odd-error")
    assert (error.kind, error.message, error.transient) == (
        "prometheus-error", "something odd", False,
    )  # fmt: skip


def test_a_proxy_error_page_is_an_http_status_error(fake):
    error = _instant_error(fake + "/proxy-page")
    assert error.kind == "http-status" and error.transient and "503" in error.message


def test_special_values_and_warnings(fake):
    result = _instant(fake + "/specials")
    values = {s.label("le"): s.points[0][1] for s in result.series}
    assert math.isnan(values["a"]) and values["b"] == math.inf and values["c"] == -math.inf
    assert values["d"] == 0.001
    assert result.warnings == ("PromQL info: metric might not be a counter",)
    assert result.series[0] == Series(
        labels=(("le", "a"),), points=((1.5, result.series[0].points[0][1]),)
    )


@pytest.mark.parametrize(
    "behaviour", ["wrong-shape", "bad-value", "number-value", "bare-nan", "deep", "text"]
)
def test_wrong_shaped_or_non_json_bodies_are_malformed(fake, behaviour):
    error = _instant_error(f"{fake}/{behaviour}")
    assert error.kind == "malformed" and not error.transient


def test_too_many_series_are_refused(fake):
    error = _instant_error(fake + "/many-series")
    assert error.kind == "too-large" and "10,000" in error.message


def test_a_hanging_prometheus_is_a_bounded_transient_timeout(fake):
    # /hang never answers: only a deadline can end this call, so "timeout" proves it is
    # bounded (an unbounded one would hang the test until the CI step's own timeout).
    error = _instant_error(fake + "/hang", EVERYWHERE)
    assert error.kind == "timeout" and error.transient


def test_huge_garbage_and_redirects_are_clear_errors(fake):
    assert _instant_error(fake + "/huge").kind == "too-large"
    assert _instant_error(fake + "/garbage").kind in ("protocol", "transport")
    error = _instant_error(fake + "/redirect-metadata", EVERYWHERE)
    assert error.kind == "redirect" and "169.254.169.254" in error.message


def test_single_value_of_a_matrix_is_refused():
    matrix = QueryResult("matrix", series=(Series((), ((1.0, 2.0),)),))
    with pytest.raises(ProbeError) as caught:
        single_value(matrix)
    assert caught.value.kind == "promql-not-single"
    assert single_value(QueryResult("vector", series=(Series((), ((1.0, 2.0),)),))) == 2.0


# --- templates ----------------------------------------------------------------------------


@pytest.mark.slow
def test_an_injection_attempt_matches_nothing_on_a_real_prometheus(prometheus):
    """The escaped attack is a label value Prometheus parses, and no series has it."""
    query = render_promql('up{job="${job}"}', job='"} or vector(1) #')
    result = _run(lambda c: instant_query(c, prometheus.base, query, POLICY))
    assert result.result_type == "vector" and result.series == ()


@pytest.mark.slow
@pytest.mark.django_db
def test_a_prometheus_target_is_polled_with_its_configured_queries(prometheus, team):
    from datetime import UTC, datetime

    from probes.models import Observation, Poll, Target, TargetKind
    from probes.tasks import poll_deployment
    from tests.support import builders

    deployment = builders.deployment(team, "atlas-prom")
    target = Target.objects.create(
        deployment=deployment,
        kind=TargetKind.PROMETHEUS,
        url=prometheus.base,
        queries={
            "router_forward_p95": render_promql(ROUTER_P95, job="router", window="10s"),
            "broken": "sum(",
        },
    )
    # Cycles are whole seconds; the first one after Prometheus had data to answer with.
    time.sleep(max(0.0, prometheus.ready_at + 1.1 - time.time()))
    cycle = datetime.fromtimestamp(int(time.time()), tz=UTC)
    poll_deployment.apply(args=[str(deployment.pk), cycle.isoformat()])
    poll = Poll.objects.get(target=target)
    assert poll.ok
    assert poll.snapshot["errors"]["broken"].startswith("promql-bad_data")
    value = Observation.objects.get(target=target, signal="router_forward_p95").value
    assert 0 < value < 0.02
