"""A real Prometheus server scrapes the simulator and answers histogram_quantile queries."""

from __future__ import annotations

import math
import time

import pytest

from enginesim.deployment import SimClock
from tests.support.prometheus import prometheus, query

pytestmark = pytest.mark.slow


def test_prometheus_scrapes_and_answers_quantiles(harness, tmp_path):
    h = harness("healthy", replicas=2, clock=SimClock("realtime", 20.0))
    jobs = [("vllm", "/metrics"), ("vllm-replica1", "/replicas/1/metrics"),
            ("router", "/router/metrics"), ("dcgm", "/dcgm/metrics")]  # fmt: skip
    with prometheus(tmp_path, f"127.0.0.1:{h.port}", jobs) as base:
        deadline = time.monotonic() + 40
        ttft = router = None
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                res = query(
                    base,
                    "histogram_quantile(0.95, rate(vllm:time_to_first_token_seconds_bucket[30s]))",
                )
                rres = query(
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
        up = query(base, "up")
        assert {r["metric"]["job"] for r in up if r["value"][1] == "1"} == {j for j, _ in jobs}
        util = query(base, "DCGM_FI_DEV_GPU_UTIL")
        assert len(util) == 4
        kv = query(base, "vllm:kv_cache_usage_perc")
        assert {r["metric"]["engine"] for r in kv} == {"0", "1"}
