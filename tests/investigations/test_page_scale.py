"""The investigation page at scale: a 50-hypothesis playbook over 50,000 stored observations
renders within a fixed number of queries (the tree refresh of every 5 s, and the evidence
cards), whatever the number of nodes, checks or points.

``build_record`` is also what bench/investigation_page.py times.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from django.urls import reverse
from django.utils import timezone

from investigations import actions, live
from investigations.charts import MAX_POINTS
from investigations.evidence import frozen_evidence
from investigations.models import FixRecord, Investigation
from investigations.playbook import parse_playbook, playbooks
from probes.models import Observation, Target, TargetKind
from tests.support import builders

SYMPTOM = "synthetic-fifty"
STEP_S = 5
SIGNALS = (
    "kv_cache_usage", "requests_running", "requests_waiting", "gen_throughput",
    "cache_hit_rate", "preemptions_rate", "prompt_tokens_rate", "generation_tokens_rate",
    "e2e_count_rate", "ttft_p50", "ttft_p95", "ttft_p99", "ttft_mean", "itl_p50", "itl_p95",
    "itl_p99", "itl_mean", "e2e_p95", "e2e_p99", "queue_time_p95", "queue_time_p99",
    "prefill_time_mean", "decode_time_mean", "iteration_tokens_p50", "iteration_tokens_p99",
)  # fmt: skip
CAUSES = (
    "router-latency", "queue-backlog", "prefill-slow", "kv-cache-pressure",
    "cuda-graph-pool-growth", "kv-block-leak", "allocator-leak", "oversized-prefill-chunks",
    "gc-pauses", "tp-straggler", "gpu-throttling",
)  # fmt: skip
REDUCERS = ("max", "mean", "last", "min", "increase")


def _check(i: int) -> dict:
    signal = SIGNALS[i % len(SIGNALS)]
    reducer = REDUCERS[i % len(REDUCERS)]
    return {
        "id": f"check-{i:02d}",
        "title": f"Check {i} on {signal}",
        "measure": {"source": "engine", "signal": signal, "reduce": reducer, "window": 300},
        "confirm": {"op": ">", "value": 0.9},
        "eliminate": {"op": "<=", "value": 0.1},
    }


def scale_playbook_yaml(size: int = 50) -> str:
    """``size`` hypotheses: each of the 11 causes (fewer for a smaller size) at the end of
    a chain of groups (leaves must be documented causes), one engine check per node."""
    causes = CAUSES[:size]
    groups = size - len(causes)
    counter = iter(range(size))
    hypotheses = []
    for n, cause in enumerate(causes):
        depth = groups // len(causes) + (1 if n < groups % len(causes) else 0)
        node = {
            "key": cause,
            "title": f"Cause {cause}",
            "rationale": "Synthetic, for scale.",
            "prior": 0.5,
            "checks": [_check(next(counter))],
        }
        if cause == "kv-cache-pressure":
            node["fix"] = {
                "key": "fewer-seats",
                "title": "Fewer seats",
                "command": "vllm serve --max-num-seqs 28",
                "verify": [
                    {
                        "title": "KV usage under 0.8",
                        "measure": {
                            "source": "engine",
                            "signal": "kv_cache_usage",
                            "reduce": "max",
                        },
                        "when": {"op": "<", "value": 0.8},
                    }
                ],
                "alert": {"name": "AtlasSynthetic", "expr": "up == 0", "for": "5m", "summary": "s"},
            }
        for level in range(depth):
            node = {
                "key": f"group-{n:02d}-{level}",
                "title": f"Group {n}.{level}",
                "rationale": "Synthetic, for scale.",
                "prior": 0.5,
                "checks": [_check(next(counter))],
                "children": [node],
            }
        hypotheses.append(node)
    document = {
        "schema": 1,
        "key": SYMPTOM,
        "version": 1,
        "title": "Synthetic fifty-node playbook",
        "summary": "For the scale test.",
        "alarm": {
            "measure": {"source": "engine", "signal": "ttft_p95", "reduce": "max"},
            "when": {"op": ">", "value": "budget.ttft_target_ms / 1000"},
        },
        "hypotheses": hypotheses,
    }
    return yaml.safe_dump(document, sort_keys=False)


def register(size: int = 50, key: str = SYMPTOM):
    text = scale_playbook_yaml(size).replace(f"key: {SYMPTOM}", f"key: {key}", 1)
    playbook = parse_playbook(text, f"{key}.yaml")
    playbooks()[key] = playbook
    return playbook


def build_record(team, user, *, observations: int = 50_000, symptom: str = SYMPTOM, name="big"):
    """A deployment with ``observations`` engine samples (every signal every 5 s, newest
    now), an investigation opened two hours ago with decisions, a confirmed cause and its
    fix: everything the page draws."""
    now = timezone.now().replace(microsecond=0)
    deployment = builders.deployment(team, name)
    engine = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://10.0.0.5/metrics",
        last_polled_at=now, last_success_at=now,
    )  # fmt: skip
    Target.objects.create(
        deployment=deployment, kind=TargetKind.DCGM, url="http://10.0.0.5:9400/metrics",
        last_polled_at=now, last_error_at=now, last_error="connection refused",
        last_error_kind="connect", consecutive_failures=3, last_error_transient=True,
    )  # fmt: skip
    per_signal = observations // len(SIGNALS) if observations else 0
    rows = []
    for i in range(per_signal):
        at = now - timedelta(seconds=STEP_S * (per_signal - 1 - i))
        for k, signal in enumerate(SIGNALS):
            rows.append(
                Observation(
                    target=engine, taken_at=at, signal=signal, value=((i * 7 + k * 13) % 100) / 100
                )
            )
    Observation.objects.bulk_create(rows, batch_size=5000)
    investigation = actions.open_investigation(deployment=deployment, symptom=symptom, user=user)
    opened = now - timedelta(hours=2)
    Investigation.objects.filter(pk=investigation.pk).update(
        opened_at=opened, last_evaluated_at=now
    )
    investigation.refresh_from_db()
    playbook = playbooks()[symptom]
    if "kv-cache-pressure" in playbook.causes():
        for node in ("router-latency", "kv-cache-pressure"):
            shown = live.current_state(investigation, gate=False).result.find(node)
            actions.decide(
                investigation=investigation, node=node,
                action="eliminate" if node == "router-latency" else "confirm",
                reason="scale test", user=user, evidence=frozen_evidence(shown),
            )  # fmt: skip
        actions.record_fix(
            investigation=investigation, node="kv-cache-pressure", parameters={}, user=user
        )
        FixRecord.objects.filter(investigation=investigation).update(
            applied_at=now - timedelta(minutes=10)
        )
    return investigation


@pytest.fixture
def fifty(monkeypatch):
    playbook = register()
    yield playbook
    playbooks().pop(SYMPTOM, None)


def test_the_synthetic_playbook_has_fifty_hypotheses(fifty):
    assert len(list(fifty.walk())) == 50
    assert set(fifty.causes()) == set(CAUSES)


@pytest.mark.slow
def test_fifty_hypotheses_over_fifty_thousand_observations_in_a_fixed_number_of_queries(
    fifty, team, commander, client_for, django_assert_max_num_queries
):
    investigation = build_record(team, commander)
    assert Observation.objects.count() == 50_000
    client = client_for(commander)
    page_url = reverse("investigations:detail", args=[investigation.pk])
    tree_url = reverse("investigations:tree", args=[investigation.pk])
    evidence_url = reverse("investigations:evidence", args=[investigation.pk])
    # Session, user, investigation, membership, fix, targets (kinds and the read's
    # version), observations (one read), decisions, the probe strip (which also says
    # whether there are profiler targets), can_respond, the opener, the status updates
    # (comms), the incident roles and (for who may assign them) the team's members,
    # timeline, artifacts, the audit log, and (the first view in a poll cycle) the gate's
    # replay: targets and observations.
    with django_assert_max_num_queries(19):
        page = client.get(page_url)
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count('class="node ') == 50
    assert "Regression gate: AtlasSynthetic" in html
    assert 'data-testid="budget-panel"' in html and "failing 3x" in html
    # The replay is cached for the poll cycle, and the observation read is reused until
    # something new is stored (investigations.observations.load_observations).
    with django_assert_max_num_queries(16):
        warm = client.get(page_url).content.decode()
    assert "Regression gate: AtlasSynthetic" in warm
    with django_assert_max_num_queries(9):
        tree = client.get(tree_url)
    assert tree.status_code == 200 and tree.content.decode().count('class="node ') == 50
    # Cards: session, user, investigation, membership, version, fix, targets, observations
    # (one read for evaluation and every chart), decisions, then the marks' alarm onset,
    # decisions and fixes.
    with django_assert_max_num_queries(12):
        evidence = client.get(evidence_url)
    body = evidence.content.decode()
    assert evidence.status_code == 200
    assert body.count('class="chart"') == 51  # the alarm and one per check
    version = body.split('name="v" value="')[1].split('"')[0]
    # An unchanged record is not rebuilt: 204 (htmx keeps what it shows). Session, user,
    # investigation, membership, version.
    with django_assert_max_num_queries(5):
        again = client.get(evidence_url, {"v": version})
    assert again.status_code == 204


@pytest.mark.slow
def test_every_chart_stays_under_the_point_budget(fifty, team, commander, client_for):
    investigation = build_record(team, commander, observations=25_000)
    from investigations import panels

    now = timezone.now()
    signals = panels.chart_signals(investigation, fifty, now)
    state = live.current_state(investigation, now=now, extra_signals=signals, gate=False)
    cards = panels.evidence_cards(
        investigation, state.playbook, state.result, state.observations, now
    )
    charts = [chart for card in cards for chart in card["charts"]]
    assert len(charts) == 51
    assert all(0 < chart["points"] <= MAX_POINTS for chart in charts)
    for chart in charts:
        assert sum(len(trace["x"]) for trace in chart["figure"]["data"]) == chart["points"]
    # Charts of one measure share their lines (computed and serialised once): each chart
    # is still exactly what drawing it alone gives, and its JSON is its figure's.
    from investigations import charts as drawing
    from investigations.panels import chart_window, record_marks

    start, end = (t.timestamp() for t in chart_window(investigation, now))
    marks = record_marks(investigation)
    shared = 0
    for card, hypothesis in zip(cards[1:], state.playbook.walk(), strict=True):
        node = state.result.find(hypothesis.key)
        for chart, check, outcome in zip(card["charts"], hypothesis.checks, node.checks,
                                         strict=True):  # fmt: skip
            thresholds = [
                drawing.Threshold(label, condition.op, value)
                for label, condition, value in (
                    ("confirm", check.confirm, outcome.confirm_threshold),
                    ("eliminate", check.eliminate, outcome.eliminate_threshold),
                )
                if condition is not None
            ]
            alone = drawing.figure(
                check.measure, drawing.matching(check.measure, state.observations),
                start=start, end=end, marks=marks, node=hypothesis.key, thresholds=thresholds,
            )  # fmt: skip
            assert chart["figure"] == alone["figure"] and chart["caption"] == alone["caption"]
            assert json.loads(chart["figure_json"]) == alone["figure"]
            shared += any(c is not chart and c["figure"]["data"] is chart["figure"]["data"]
                          for k in cards for c in k["charts"])  # fmt: skip
    assert shared  # the fifty hypotheses do read some signals twice
