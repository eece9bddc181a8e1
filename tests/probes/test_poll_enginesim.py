"""The poll path against the simulator over real HTTP: every source gives the right
observations, and windowed values appear once there is a window."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from probes.models import Observation, TargetKind
from probes.tasks import poll_deployment
from tests.support import builders

START = datetime(2026, 1, 5, 8, 0, 0, tzinfo=UTC)


@pytest.fixture
def sim():
    server = SimServer(
        SimDeployment("tp-straggler", seed=0, clock=SimClock("manual"))
    ).start_in_thread()
    yield f"http://127.0.0.1:{server.ports['main']}"
    server.stop()


def _advance(base: str, seconds: float) -> None:
    url = f"{base}/control/advance?seconds={seconds}"
    request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 - loopback
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
        json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_engine_dcgm_and_log_targets_over_three_cycles(team, sim):
    deployment = builders.deployment(team, "atlas-sim")
    engine, dcgm, logs = builders.targets(
        deployment, sim, (TargetKind.ENGINE, TargetKind.DCGM, TargetKind.LOG_HTTP)
    )
    cycles = [START + timedelta(seconds=15 * n) for n in range(3)]
    for cycle in cycles:
        _advance(sim, 15)
        poll_deployment.apply(args=[str(deployment.pk), cycle.isoformat()])

    def values(target, signal, at):
        return dict(
            Observation.objects.filter(target=target, signal=signal, taken_at=at).values_list(
                "labels", "value"
            )
        )

    first, last = cycles[0], cycles[-1]
    assert 0 <= values(engine, "kv_cache_usage", first)[""] <= 1
    first_signals = Observation.objects.filter(target=engine, taken_at=first)
    assert not first_signals.filter(signal="ttft_p95").exists()  # one scrape: no window yet
    assert values(engine, "itl_p50", last)[""] > 0.04  # a 45 ms decode step at least
    assert values(engine, "generation_tokens_rate", last)[""] > 0
    clocks = values(dcgm, "gpu_sm_clock_mhz", last)
    assert len(clocks) == 4  # TP4: one series per GPU
    assert min(clocks.values()) < 0.95 * max(clocks.values())  # the throttled rank shows
    events = values(logs, "log_events", first)
    assert events.get("kind=chunked_prefill") == 1.0
    assert events["kind=cuda_graph_capture_after_warmup"] == 0.0  # warm-up captures only
    logs.refresh_from_db()
    assert logs.log_offset > 0 and logs.consecutive_failures == 0
