"""Playbooks are data, validated on load; the shipped ones cover every cause."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from investigations.causes import CAUSE_KEYS
from investigations.playbook import PLAYBOOK_DIR, PlaybookError, parse_playbook, playbooks
from tests.conftest import require_service

REQUIRED = {"high-ttft", "gpu-oom", "itl-spikes", "low-gpu-utilisation", "throughput-drop"}


def test_the_shipped_playbooks_load_and_cover_every_cause():
    loaded = playbooks()
    assert set(loaded) >= REQUIRED
    covered = {cause for playbook in loaded.values() for cause in playbook.causes()}
    assert covered == CAUSE_KEYS


def test_the_simulators_ground_truth_uses_the_same_cause_keys():
    from enginesim.scenarios import CAUSE_KEYS as SIMULATED

    assert set(SIMULATED) == CAUSE_KEYS


def test_walkthrough_1_tree_shape():
    playbook = playbooks()["high-ttft"]
    # Slow prefill lengthens TTFT with or without a queue: a root, not a child of it.
    assert [h.key for h in playbook.hypotheses] == [
        "router-latency",
        "prefill-slow",
        "tp-straggler",
        "gc-pauses",
        "engine-queue",
    ]
    queue = playbook.node("engine-queue")
    assert not queue.is_cause
    assert {c.key for c in queue.children} == {
        "kv-cache-pressure",
        "kv-block-leak",
        "queue-backlog",
    }
    fix = playbook.node("kv-cache-pressure").fix
    assert fix.apply["max_num_seqs"].names == {"param.max_num_seqs"}
    # The fix is verified against the measurement that raised the alarm.
    assert playbook.alarm.measure in [c.measure for c in fix.verify]


def test_every_alert_rule_passes_promtool(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        require_service("promtool", "not installed (Debian package prometheus)")
    rules = []
    for playbook in playbooks().values():
        for node in playbook.walk():
            if node.fix and node.fix.alert:
                alert = node.fix.alert
                expr = alert.expr.replace("${max_num_batched_tokens}", "512")
                rules.append(
                    {
                        "alert": alert.name,
                        "expr": expr,
                        "for": alert.for_,
                        "annotations": {"summary": alert.summary},
                    }
                )
    assert len(rules) >= 4
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "atlas", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


MINIMAL = """
schema: 1
key: test-symptom
version: 1
title: A test symptom
summary: For the validation tests.
alarm:
  measure: {source: engine, signal: ttft_p95, reduce: max, window: 300}
  when: {op: ">", value: budget.ttft_target_ms / 1000}
hypotheses:
  - key: kv-cache-pressure
    title: KV pressure
    prior: 0.5
    rationale: Because.
    checks:
      - id: kv-usage
        title: KV usage
        measure: {source: engine, signal: kv_cache_usage, reduce: max, window: 300}
        confirm: {op: ">=", value: 0.9}
"""


def test_the_minimal_playbook_is_valid():
    assert parse_playbook(MINIMAL, "minimal.yaml").causes() == ["kv-cache-pressure"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("prior: 0.5", "prior: 0.5\n    colour: blue"), "unknown field(s) colour"),
        (("key: kv-cache-pressure", "key: made-up-cause"), "not a documented cause key"),
        (("signal: kv_cache_usage", "signal: kv_cache_usge"), "is not a signal engine probes"),
        (("value: 0.9", "value: __import__('os')"), "hypotheses[0].checks[0].confirm.value"),
        (("value: 0.9", "value: budget.no_such_constant"), "the budget has no such constant"),
        (("value: 0.9", "value: observed.nothing_here"), "must name a check here"),
        (
            (
                "reduce: max, window: 300}\n        confirm",
                "reduce: p42, window: 300}\n        confirm",
            ),
            "reduce",
        ),
        (("schema: 1", "schema: 2"), "reads schema 1"),
        (
            (
                "source: engine, signal: kv_cache_usage",
                "source: prometheus, signal: kv_cache_usage",
            ),
            "needs its promql",
        ),
        (('op: ">="', 'op: "!="'), "expected one of"),
    ],
)
def test_invalid_playbooks_fail_with_the_path_of_the_field(change, message):
    old, new = change
    assert old in MINIMAL
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(MINIMAL.replace(old, new, 1), "broken.yaml")
    assert caught.value.args[0].startswith("broken.yaml: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "- just\n- a list\n",
        "{{{{",
        "a: &a [1]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: [*c, *c, *c, *c]\n",
        "!!python/object/apply:os.system ['id']",
        "x" * 300_000,
    ],
)
def test_hostile_files_are_refused_cleanly(text):
    with pytest.raises(PlaybookError):
        parse_playbook(text, "hostile.yaml")


def test_duplicate_keys_in_one_tree_are_refused():
    doubled = MINIMAL + MINIMAL[MINIMAL.index("  - key: kv-cache-pressure") :]
    with pytest.raises(PlaybookError, match="appears twice"):
        parse_playbook(doubled, "double.yaml")


def test_file_names_match_keys():
    for path in PLAYBOOK_DIR.glob("*.yaml"):
        assert yaml.safe_load(path.read_text())["key"] == path.stem


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ('{signal: nope, op: ">=", value: 1}', "is not a signal engine probes record"),
        ('{signal: requests_running, op: "!=", value: 1}', "expected one of"),
        ("{signal: requests_running, op: '>=', value: yes}", "expected a number"),
        ("{signal: requests_running}", "missing field"),
    ],
)
def test_a_where_guard_is_validated_when_the_file_loads(where, message):
    old = "measure: {source: engine, signal: kv_cache_usage, reduce: max, window: 300}"
    new = old[:-1] + f", where: {where}}}"
    with pytest.raises(PlaybookError, match=message):
        parse_playbook(MINIMAL.replace(old, new, 1), "guard.yaml")


def test_a_where_guard_loads_and_its_signal_is_read_with_the_measure():
    old = "measure: {source: engine, signal: kv_cache_usage, reduce: max, window: 300}"
    new = old[:-1] + ', where: {signal: requests_running, op: ">", value: 0}}'
    playbook = parse_playbook(MINIMAL.replace(old, new, 1), "guard.yaml")
    (measure,) = [m for m in playbook.measures() if m.where is not None]
    assert measure.where == ("requests_running", ">", 0.0)
    assert measure.gate() in playbook.measures()
