"""A real Prometheus server scrapes the simulator and answers histogram_quantile queries."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from enginesim.deployment import SimClock

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

pytestmark = pytest.mark.slow


def _require_prometheus() -> str:
    if Path(PROMETHEUS).exists():
        return PROMETHEUS
    msg = "prometheus binary missing (Debian package `prometheus`)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str) -> dict:
    assert url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback http only
        return json.loads(r.read())


def _query(base: str, expr: str) -> list:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    out = _get_json(url)
    assert out["status"] == "success", out
    return out["data"]["result"]


def test_prometheus_scrapes_and_answers_quantiles(harness, tmp_path):
    binary = _require_prometheus()
    h = harness("healthy", replicas=2, clock=SimClock("realtime", 20.0))
    target = f"127.0.0.1:{h.port}"
    cfg = tmp_path / "prometheus.yml"
    jobs = [("vllm", "/metrics"), ("vllm-replica1", "/replicas/1/metrics"),
            ("router", "/router/metrics"), ("dcgm", "/dcgm/metrics")]  # fmt: skip
    lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "scrape_configs:"]
    for job, path in jobs:
        lines += [
            f"  - job_name: {job}",
            f"    metrics_path: {path}",
            "    static_configs:",
            f"      - targets: ['{target}']",
        ]
    cfg.write_text("\n".join(lines) + "\n")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 40
        ttft = router = None
        while time.monotonic() < deadline:
            time.sleep(1)
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}")
            try:
                res = _query(
                    base,
                    "histogram_quantile(0.95, rate(vllm:time_to_first_token_seconds_bucket[30s]))",
                )
                rres = _query(
                    base,
                    "histogram_quantile(0.95, rate(router_forward_duration_seconds_bucket[30s]))",
                )
            except OSError:
                continue
            vals = [float(r["value"][1]) for r in res]
            rvals = [float(r["value"][1]) for r in rres]
            if len(vals) == 2 and all(math.isfinite(v) for v in vals) and rvals:
                ttft, router = vals, rvals
                break
        assert ttft is not None, "no histogram_quantile answer within 40 s"
        assert all(0.01 < v < 2.0 for v in ttft), ttft  # healthy: around the 480 ms baseline
        assert all(0.0 < v < 0.02 for v in router), router  # router under the 20 ms bar
        up = _query(base, "up")
        assert {r["metric"]["job"] for r in up if r["value"][1] == "1"} == {j for j, _ in jobs}
        util = _query(base, "DCGM_FI_DEV_GPU_UTIL")
        assert len(util) == 4
        kv = _query(base, "vllm:kv_cache_usage_perc")
        assert {r["metric"]["engine"] for r in kv} == {"0", "1"}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
