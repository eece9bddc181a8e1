"""The simulator's engine log, read the way the probes read it (probes.parsing.logevents):
warm-up captures are not mistaken for on-the-fly captures, and real ones are caught."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from probes.parsing.logevents import FollowerState, feed

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _events(harness_instance, path: str = "/logs?offset=0&limit=4000000"):
    _, events = feed(FollowerState(), harness_instance.get(path), NOW, final=True)
    return events


def _late_captures(events) -> int:
    return sum(
        1
        for e in events
        if e.kind == "cuda_graph_capture_finished" and e.values.get("after_warmup")
    )


def test_a_healthy_engine_shows_only_its_warm_up_captures(harness):
    h = harness("healthy")
    h.advance(120)
    events = _events(h)
    finished = [e for e in events if e.kind == "cuda_graph_capture_finished"]
    assert len(finished) == 1
    assert _late_captures(events) == 0
    assert any(e.kind == "chunked_prefill" for e in events)


def test_graph_pool_growth_shows_captures_after_warm_up(harness):
    h = harness("graph-pool-growth")
    late = 0
    for _ in range(30):  # up to 15 simulated minutes
        h.advance(30)
        late = _late_captures(_events(h))
        if late >= 2:
            break
    assert late >= 2


@pytest.mark.parametrize("fmt", ["vllm-v1", "sglang"])
def test_allocator_leak_restarts_show_warm_up_captures_and_one_oom_each(harness, fmt):
    """After each OOM restart the new engine's captures come before its ready line: they
    are warm-up, not pool growth; and each OOM's cascade counts once."""
    h = harness("allocator-leak", fmt=fmt)
    engine = h.d.replicas[0].engine
    for _ in range(30):  # up to 15 simulated minutes
        h.advance(30)
        if engine.restarts >= 2 and engine.is_up:
            break
    assert engine.restarts >= 2 and engine.is_up
    events = _events(h)
    assert sum(e.kind == "cuda_graph_capture_finished" for e in events) == engine.restarts + 1
    assert _late_captures(events) == 0
    assert sum(e.kind == "cuda_oom" for e in events) == engine.ooms
