"""router-slow needs what an on-call has for it: a Prometheus server scraping the router.
Realtime simulator (20x), a real Prometheus, diagnose's engine over real HTTP."""

from __future__ import annotations

import time

import pytest

from deployments.budget import Budget
from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from investigations.diagnose import Diagnosis
from investigations.playbook import playbooks
from probes.policy import fetch_policy
from tests.matrix.test_matrix import check
from tests.support.prometheus import prometheus, wait_for_series

pytestmark = pytest.mark.slow


def test_router_slow_ranks_the_router_first(tmp_path):
    server = SimServer(
        SimDeployment("router-slow", seed=0, clock=SimClock("realtime", 20.0))
    ).start_in_thread()
    target = f"127.0.0.1:{server.ports['main']}"
    try:
        jobs = [("router", "/router/metrics"), ("vllm", "/metrics")]
        with prometheus(tmp_path, target, jobs) as prom:
            wait_for_series(prom, "rate(router_forward_duration_seconds_count[1m]) > 0")
            diagnosis = Diagnosis(
                playbooks()["high-ttft"],
                Budget(),
                [("engine", f"http://{target}/metrics"), ("prometheus", prom)],
                fetch_policy(),
            )
            for cycle in range(2):
                if cycle:
                    time.sleep(2.0)  # 40 simulated seconds
                diagnosis.cycle()
            result = diagnosis.evaluate()
    finally:
        server.stop()
    router = next(c for c in result.find("router-latency").checks)
    assert router.measured is not None and router.measured > 0.05, router
    # Two cycles two real seconds apart: prefill time against its budget may sit between
    # the thresholds; everything else must be decided.
    check("router-slow", {"high-ttft": result}, between_is_ok=frozenset({"prefill-slow"}))
