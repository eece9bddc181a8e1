"""A deployment whose engines only Prometheus reaches: the engine signals Prometheus stands
in for (probes.engine_promql) are read when no engine target reported them, and never
over an engine target's own."""

from __future__ import annotations

from investigations.evaluation import PROMETHEUS_STANDS_IN, evaluate, reduce
from investigations.playbook import Measure, playbooks
from probes.engine_promql import STANDS_IN
from probes.vocabulary import known_signal
from tests.investigations.test_evaluation import ATLAS, NOW, flat, walkthrough_1


def _through_prometheus(observations: dict) -> dict:
    """What a deployment with only a Prometheus target holds: the engine signals Prometheus
    stands in for under its own source, and none of the others."""
    return {
        (("prometheus", signal) if source == "engine" else (source, signal)): series
        for (source, signal), series in observations.items()
        if source != "engine" or signal in STANDS_IN
    }


def test_every_stand_in_is_an_engine_signal_the_probe_records():
    assert set(STANDS_IN) == PROMETHEUS_STANDS_IN
    assert all(known_signal("engine", s) and known_signal("prometheus", s) for s in STANDS_IN)


def test_walkthrough_1_through_prometheus_alone_ranks_kv_pressure_first():
    direct = evaluate(playbooks()["high-ttft"], ATLAS, walkthrough_1(), NOW)
    observations = _through_prometheus(walkthrough_1())
    assert ("engine", "kv_cache_usage") not in observations
    stood_in = evaluate(playbooks()["high-ttft"], ATLAS, observations, NOW)
    assert stood_in.alarm.firing is True
    assert stood_in.ranking[0] == direct.ranking[0] == "kv-cache-pressure"
    # Confirmed, not only first: the veto (KV the running requests cannot account for) is
    # judged, from the token and request rates Prometheus answers too.
    assert stood_in.find("kv-cache-pressure").suggestion == "confirm"
    assert stood_in.find("queue-backlog").suggestion == "eliminate"
    kv = {c.id: c for c in stood_in.find("kv-cache-pressure").checks}
    assert kv["kv-usage"].outcome == "confirm" and kv["kv-usage"].measured == 0.94
    assert kv["preemption-rate"].outcome == "confirm"


def test_an_engine_targets_own_series_wins_over_prometheus():
    observations = {
        ("engine", "kv_cache_usage"): [("", flat(0.5))],
        ("prometheus", "kv_cache_usage"): [("", flat(0.99))],
    }
    measure = Measure("kv_cache_usage", "engine", "max", 300)
    assert reduce(measure, observations, NOW) == 0.5
    del observations[("engine", "kv_cache_usage")]
    assert reduce(measure, observations, NOW) == 0.99
