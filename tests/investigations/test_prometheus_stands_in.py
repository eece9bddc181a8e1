"""A deployment whose engines only Prometheus reaches: the engine signals Prometheus stands
in for (probes.engine_promql) are read when no engine target reported them, and never
over an engine target's own."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from investigations.evaluation import PROMETHEUS_STANDS_IN, evaluate, reduce
from investigations.playbook import Measure, playbooks
from probes.engine_promql import STANDS_IN
from probes.vocabulary import known_signal
from tests.conftest import require_service
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


def test_every_stand_in_query_is_promql_that_promtool_accepts(tmp_path):
    """The stand-ins only ever run against a customer's Prometheus: a typo would surface as
    an error on their target, minutes into an incident. promtool parses each one."""
    promtool = shutil.which("promtool")
    if promtool is None:
        require_service("promtool", "not installed (Debian package prometheus)")
    rules = [{"record": f"atlas:{signal}", "expr": expr} for signal, expr in STANDS_IN.items()]
    path = tmp_path / "stands_in.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "atlas", "rules": rules}]}))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _storm_without_finishes(through_prometheus: bool) -> dict:
    """Walkthrough 1 seconds into a preemption storm: the range counted two finishes and
    two first tokens (an anecdote), while the engine's lengths since start are known."""
    observations = walkthrough_1(
        {
            ("engine", "e2e_count_rate"): [("", flat(0.02))],
            ("engine", "ttft_count_rate"): [("", flat(0.02))],
            ("engine", "ttft_window_count"): [("", flat(2))],
            ("engine", "e2e_window_count"): [("", flat(2))],
            ("engine", "prompt_tokens_per_request"): [("", flat(2000))],
            ("engine", "output_tokens_per_request"): [("", flat(1100))],
        }
    )
    return _through_prometheus(observations) if through_prometheus else observations


def test_a_storm_with_no_finishes_reads_the_same_lengths_through_prometheus():
    """In a storm finishes stall: the range's tokens over two requests are an anecdote, and
    the lengths since start stand in. Prometheus answers those too, so a deployment seen
    only through it judges the veto (KV the running requests cannot account for) on the
    same lengths as one whose engine Atlas polls, instead of holding KV pressure back."""
    direct = evaluate(playbooks()["high-ttft"], ATLAS, _storm_without_finishes(False), NOW)
    stood_in = evaluate(playbooks()["high-ttft"], ATLAS, _storm_without_finishes(True), NOW)
    for key in ("expected.avg_prompt_tokens", "expected.kv_usage_of_running"):
        assert stood_in.expected[key] == pytest.approx(direct.expected[key]), key
    assert stood_in.expected["expected.avg_prompt_tokens"] == pytest.approx(2000)
    assert stood_in.find("kv-cache-pressure").suggestion == "confirm"
