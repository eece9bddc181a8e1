"""A stored gc log against the deployment's stored ITL record: spikes inside pauses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from artifacts.actions import store
from artifacts.models import Artifact
from artifacts.tasks import analyse_artifact
from probes.models import Observation, Poll, TargetKind
from tests.support import builders

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def _vllm(ts: datetime, message: str) -> str:
    return f"(APIServer pid=1) INFO {ts:%m-%d %H:%M:%S} [loggers.py:236] {message}"


def _gc_log() -> str:
    lines = []
    for minute in range(6):
        ts = T0 + timedelta(minutes=minute)
        lines.append(_vllm(ts, "Engine 000: Avg prompt throughput: 900.0 tokens/s"))
        lines += [
            "gc: collecting generation 2...",
            "gc: objects in each generation: 500 3000 1200000",
            "gc: objects in permanent generation: 0",
            "gc: done, 100 unreachable, 0 uncollectable, 0.1200s elapsed",
        ]
        lines.append(_vllm(ts + timedelta(seconds=1), "Engine 000: Avg prompt throughput: 900.0"))
    return "\n".join(lines) + "\n"


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path


@pytest.mark.django_db
def test_spikes_inside_the_logged_pauses_are_explained(team):
    deployment = builders.deployment(team)
    engine = builders.target(deployment, TargetKind.ENGINE, "http://127.0.0.1:9/metrics")
    points = []
    for second in range(0, 360, 5):
        at = T0 + timedelta(seconds=second)
        spike = second % 60 == 0  # one poll per minute lands in a pause
        points.append((at, 0.17 if spike else 0.05))
    polls = [Poll(target=engine, cycle_at=at, ok=True) for at, _ in points]
    Poll.objects.bulk_create(polls)
    Observation.objects.bulk_create(
        Observation(target=engine, signal="itl_p99", labels="", taken_at=at, value=value)
        for at, value in points
    )
    artifact = store(
        deployment=deployment,
        chunks=[_gc_log().encode()],
        name="engine-stderr.log",
        source="upload",
    )
    analyse_artifact.apply(args=[str(artifact.pk)])
    artifact = Artifact.objects.get(pk=artifact.pk)
    correlation = artifact.analysis["correlation"]
    assert correlation["spikes"] == 6 and correlation["spikes_in_pause_window"] == 6
    assert artifact.signals["artifact_gc_spike_share"] == 1.0
    assert "gc-pauses" in [f["key"] for f in artifact.findings]
