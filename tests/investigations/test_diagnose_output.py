"""What `diagnose` prints: each check's span and what it still needs, and the ranking with
state, score and evidence count ("no data" where there is none)."""

from __future__ import annotations

import json

from investigations.diagnose import evaluation_json, ranking_lines
from tests.investigations.test_evidence_rules import WALKTHROUGH_1, engine_view, high_ttft


def _walkthrough_after_10_s():
    return high_ttft(engine_view(10, {**WALKTHROUGH_1, "preemptions_rate": 0.0}))


def test_the_json_carries_span_bucket_and_needs_more_data():
    report = evaluation_json(_walkthrough_after_10_s())
    json.dumps(report, allow_nan=False)
    queue = next(h for h in report["hypotheses"] if h["key"] == "engine-queue")
    pressure = next(c for c in queue["children"] if c["key"] == "kv-cache-pressure")
    rate = next(e for e in pressure["evidence"] if e["check"] == "preemption-rate")
    assert rate["span"]["seconds"] == 10.0 and rate["span"]["samples"] == 2
    assert rate["needs_more_data"] == "needs ≥ 170 s more data" and rate["needs_s"] == 170
    backlog = next(c for c in queue["children"] if c["key"] == "queue-backlog")
    wait = next(e for e in backlog["evidence"] if e["check"] == "queue-wait-p95")
    assert wait["bucket"] == [1.0, 2.5]
    ranked = {r["key"]: r for r in report["ranked"]}
    assert report["ranked"][0]["key"] == "kv-cache-pressure"
    assert ranked["router-latency"]["evidence_count"] == 0


def test_the_text_ranking_says_no_data_and_what_waits_for_more():
    lines = ranking_lines(_walkthrough_after_10_s())
    assert "kv-cache-pressure" in lines[0] and "suggests inconclusive" in lines[0]
    router = next(line for line in lines if "router-latency" in line)
    assert router.endswith("no data")
    waiting = next(line for line in lines if "preemption-rate" in line)
    assert "2 sample(s) over 10 s of a 300 s window" in waiting
    assert "needs ≥ 170 s more data" in waiting
