"""Side by side with a real Prometheus: same raw samples in, same numbers out.

A stdlib HTTP server serves a counter (with a reset) and a histogram that evolve on every
scrape; Prometheus scrapes it each second. After ~20 s we fetch the raw samples Prometheus
stored (``x[20s]``) and compare our functions with Prometheus's own ``rate``, ``increase``
and ``histogram_quantile`` at the same evaluation time.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from probes.parsing.windowed import histogram_quantile_over_window, increase, rate
from tests.support.processes import spawn_logged

pytestmark = pytest.mark.slow

BOUNDS = ("0.05", "0.1", "0.25", "0.5", "1.0", "+Inf")
WINDOW = 20


def _metrics_body(i: int) -> str:
    # Counter resets at scrape 9; histogram buckets grow unevenly so quantiles move.
    counter = 3.0 * (i - 9) if i >= 9 else 1000.0 + 17.0 * i
    steady = 5e6 + 1234.5 * i
    lines = [
        "# TYPE atlas_test_requests_total counter",
        f"atlas_test_requests_total {counter}",
        "# TYPE atlas_test_tokens_total counter",
        f"atlas_test_tokens_total {steady}",
        "# TYPE atlas_test_latency_seconds histogram",
    ]
    increments = (1, 3 + i % 3, 2 * i, 5, 1 + i // 4, 0.5 * i)
    cumulative = 0.0
    for bound, inc in zip(BOUNDS, increments, strict=True):
        cumulative += 10 + inc * i
        lines.append(f'atlas_test_latency_seconds_bucket{{le="{bound}"}} {cumulative}')
    lines.append(f"atlas_test_latency_seconds_count {cumulative}")
    lines.append(f"atlas_test_latency_seconds_sum {cumulative * 0.3}")
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    scrapes = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        with _Handler.lock:
            body = _metrics_body(_Handler.scrapes).encode()
            _Handler.scrapes += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(base: str, expr: str, at: float) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (loopback only)
        payload = json.load(resp)
    assert payload["status"] == "success", payload
    return payload["data"]["result"]


def _points(series: dict) -> list[tuple[float, float]]:
    return [(float(t), float(v)) for t, v in series["values"]]


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.fixture
def prometheus(tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        message = "prometheus binary unavailable"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    _Handler.scrapes = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
        "scrape_configs:\n  - job_name: atlas\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{server.server_address[1]}']\n"
    )
    proc = spawn_logged(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        tmp_path / "prometheus.log",
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _before_v3_6(base: str) -> bool:
    with urllib.request.urlopen(f"{base}/api/v1/status/buildinfo", timeout=5) as resp:  # noqa: S310
        version = json.load(resp)["data"]["version"]
    major, minor = (int(part) for part in version.split(".")[:2])
    return (major, minor) < (3, 6)


def test_matches_real_prometheus(prometheus):
    deadline = time.monotonic() + 40
    raw: list[dict] = []
    at = 0.0
    while time.monotonic() < deadline:
        time.sleep(1)
        at = round(time.time() - 0.3, 3)
        try:
            raw = _query(prometheus, f"atlas_test_requests_total[{WINDOW}s]", at)
        except OSError:
            continue  # not listening yet
        if raw and len(raw[0]["values"]) >= WINDOW - 1:
            break
    assert raw, "Prometheus stored no samples"
    assert len(raw[0]["values"]) >= WINDOW - 1
    # Prometheus 2.x includes a sample exactly on the left edge, 3.x does not; avoid it.
    if any(abs(float(t) - (at - WINDOW)) < 0.0005 for t, _ in raw[0]["values"]):
        at += 0.001
    legacy = _before_v3_6(prometheus)
    checked = 0
    for metric in ("atlas_test_requests_total", "atlas_test_tokens_total"):
        points = _points(_query(prometheus, f"{metric}[{WINDOW}s]", at)[0])
        for fn, ours in (("rate", rate), ("increase", increase)):
            theirs = float(_query(prometheus, f"{fn}({metric}[{WINDOW}s])", at)[0]["value"][1])
            mine = ours(points, WINDOW, at, before_v3_6=legacy)
            assert mine is not None
            assert _close(mine, theirs), (metric, fn, mine, theirs)
            checked += 1
    buckets = {
        float(s["metric"]["le"]): _points(s)
        for s in _query(prometheus, f"atlas_test_latency_seconds_bucket[{WINDOW}s]", at)
    }
    assert len(buckets) == len(BOUNDS)
    their_rates = {
        float(s["metric"]["le"]): float(s["value"][1])
        for s in _query(prometheus, f"rate(atlas_test_latency_seconds_bucket[{WINDOW}s])", at)
    }
    for bound, points in buckets.items():
        mine = rate(points, WINDOW, at, before_v3_6=legacy)
        assert mine is not None
        assert _close(mine, their_rates[bound]), (bound, mine, their_rates[bound], points)
    for q in (0.5, 0.9, 0.95, 0.99):
        expr = f"histogram_quantile({q}, rate(atlas_test_latency_seconds_bucket[{WINDOW}s]))"
        theirs = float(_query(prometheus, expr, at)[0]["value"][1])
        mine = histogram_quantile_over_window(q, buckets, WINDOW, at, before_v3_6=legacy)
        assert _close(mine, theirs), (q, mine, theirs)
        checked += 1
    assert checked == 8
