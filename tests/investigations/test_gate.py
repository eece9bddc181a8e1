"""The confirming signal becomes an alert rule that promtool accepts, and the backtest
says whether it would have fired before the alarm."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from deployments.budget import Budget
from investigations.gate import alert_rule, backtest, duration_s, rules_yaml
from investigations.playbook import playbooks
from tests.conftest import require_service


def test_the_rule_is_rendered_with_the_fix_parameters_and_links_back():
    node = playbooks()["itl-spikes"].node("oversized-prefill-chunks")
    rule = alert_rule(
        node, {"max_num_batched_tokens": 512.0},
        investigation_url="https://atlas.example/investigations/abc/", investigation_id="abc",
    )  # fmt: skip
    assert rule["expr"].endswith("> 512")
    assert rule["for"] == "10m"
    assert rule["labels"]["atlas_cause"] == "oversized-prefill-chunks"
    assert rule["annotations"]["investigation"] == "https://atlas.example/investigations/abc/"


def test_generated_rules_pass_promtool(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        require_service("promtool", "not installed (Debian package prometheus)")
    rules = []
    for playbook in playbooks().values():
        for node in playbook.walk():
            if node.fix and node.fix.alert:
                rules.append(
                    alert_rule(
                        node,
                        {"max_num_batched_tokens": 512.0},
                        investigation_url="http://127.0.0.1:8000/investigations/x/",
                        investigation_id="x",
                    )
                )
    path = tmp_path / "gates.yml"
    path.write_text(rules_yaml(rules))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(yaml.safe_load(path.read_text())["groups"][0]["rules"]) == len(rules)


def _series(points):
    return [("", points)]


def test_the_backtest_fires_before_the_alarm_in_walkthrough_1():
    # KV pressure builds from t=1000; p95 TTFT crosses 600 ms only at t=1600.
    times = [float(t) for t in range(0, 2400, 15)]
    observations = {
        ("engine", "kv_cache_usage"): _series([(t, 0.94 if t >= 1000 else 0.6) for t in times]),
        ("engine", "preemptions_rate"): _series([(t, 0.1 if t >= 1000 else 0.0) for t in times]),
        ("engine", "ttft_p95"): _series([(t, 1.4 if t >= 1600 else 0.45) for t in times]),
    }
    playbook = playbooks()["high-ttft"]
    node = playbook.node("kv-cache-pressure")
    result = backtest(playbook, node, Budget(), observations, start=0, end=2400)
    # The confirming checks hold from 1000 (they read the max/mean over 5 minutes, so a
    # little later for the mean), plus the rule's for: 5m.
    assert result.alarm_at == 1605
    assert result.fired_at is not None and result.fired_at < result.alarm_at
    assert result.lead_s == result.alarm_at - result.fired_at > 0


def test_a_signal_that_never_held_does_not_fire():
    playbook = playbooks()["high-ttft"]
    node = playbook.node("kv-cache-pressure")
    observations = {("engine", "ttft_p95"): _series([(float(t), 1.4) for t in range(0, 600, 15)])}
    result = backtest(playbook, node, Budget(), observations, start=0, end=600)
    assert result.fired_at is None and result.lead_s is None and result.alarm_at == 0


@pytest.mark.parametrize(("text", "seconds"), [("10m", 600), ("1h", 3600), ("30s", 30)])
def test_durations(text, seconds):
    assert duration_s(text) == seconds
