"""The document is derived from the record: detection, impact, every decided branch with
its frozen evidence, root cause, fix, verification and the regression gate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from postmortems.record import affected_requests, alarm_breaches, load_document


def test_the_document_is_built_from_the_record(incident, t0):
    doc = load_document(incident)
    assert doc["title"] == "p95 time to first token over target on atlas-prod"
    assert doc["opened_by"] == "cora-commander" and doc["opened_at"] == t0
    assert doc["closed_at"] == t0 + timedelta(minutes=35)
    detection = doc["detection"]
    assert detection["signal"] == "ttft_p95" and detection["op"] == ">"
    assert detection["threshold"] == pytest.approx(0.6)
    assert detection["first_firing_at"] == t0 + timedelta(seconds=30)
    impact = doc["impact"]
    assert impact["breach_s"] == pytest.approx(16.5 * 60)
    assert not impact["ongoing"]
    # 12 req/s until the storm ends at T0+16m, then 10 req/s until the clear at T0+17m.
    assert impact["affected_requests"] == pytest.approx(12 * 15.5 * 60 + 10 * 60, rel=0.02)
    states = {n["key"]: n["state"] for n in doc["tree"]}
    assert states["router-latency"] == "eliminated" and states["kv-cache-pressure"] == "confirmed"
    assert {n["key"] for n in doc["eliminated"]} == {
        "router-latency",
        "prefill-slow",
        "kv-block-leak",
    }
    router = next(n for n in doc["tree"] if n["key"] == "router-latency")
    (decision,) = router["decisions"]
    assert decision["decided_by"] == "remi-responder" and not decision["automatic"]
    assert decision["decided_at"] == t0 + timedelta(minutes=4)
    (check,) = decision["checks"]
    assert check["measured"] == pytest.approx(0.004) and check["eliminate_threshold"] == 0.02
    assert doc["root_cause"]["key"] == "kv-cache-pressure"
    assert doc["root_cause"]["confirmed_by"]["decided_by"] == "cora-commander"
    fix = doc["fix"]
    assert fix["key"] == "fewer-max-num-seqs" and fix["applied_by"] == "cora-commander"
    assert f"--max-num-seqs {fix['parameters']['max_num_seqs']}" in fix["command"]
    assert doc["verification"]["state"] == "passing"
    assert doc["verification"]["at"] == doc["closed_at"]
    gate = doc["gate"]
    assert gate["name"] == "AtlasKVCachePressure"
    assert "alert: AtlasKVCachePressure" in gate["rule_yaml"]
    assert gate["backtest"]["fired_at"] is not None
    kinds = [e["kind"] for e in doc["timeline"]]
    assert kinds[0] == "opened" and kinds[-1] == "closed" and kinds.count("decision") == 5
    chart = doc["chart"]
    assert chart["series"] and chart["threshold"] == pytest.approx(0.6)
    assert (
        len(chart["markers"]) == 5 and chart["fix_at"] == (t0 + timedelta(minutes=15)).timestamp()
    )


def test_a_close_override_is_kept_and_an_open_breach_is_ongoing(open_incident, commander, t0):
    from investigations import actions
    from investigations.models import TimelineEvent

    TimelineEvent.objects.filter(kind="alarm", data__firing=False).delete()
    actions.close_investigation(
        investigation=open_incident,
        user=commander,
        override="Customer traffic moved to the backup region",
    )
    open_incident.refresh_from_db()
    doc = load_document(open_incident)
    assert doc["verification"]["override"] == "Customer traffic moved to the backup region"
    assert doc["impact"]["ongoing"]


def _at(minute: int) -> datetime:
    return datetime(2026, 1, 5, 8, minute, tzinfo=UTC)


def _event(minute: int, verb: str) -> dict:
    return {
        "at": _at(minute),
        "kind": "alarm",
        "summary": f"Alarm {verb}: 1 against 0.6",
        "data": {"firing": verb == "firing", "measured": 1.0, "threshold": 0.6},
    }


def test_breaches_pair_firing_with_clear_and_run_to_the_end_without_one():
    timeline = [_event(1, "firing"), _event(5, "clear"), _event(10, "firing")]
    breaches = alarm_breaches(timeline, end=_at(20))
    assert [(b["seconds"], b["cleared"]) for b in breaches] == [(240, True), (600, False)]


def test_affected_requests_are_unknown_without_a_request_rate():
    breaches = alarm_breaches([_event(1, "firing"), _event(5, "clear")], end=_at(20))
    assert affected_requests(breaches, []) is None
    assert affected_requests(breaches, [[(_at(30).timestamp(), 5.0)]]) is None
    points = [(_at(0).timestamp() + 30 * i, 2.0) for i in range(20)]
    assert affected_requests(breaches, [points]) == 480


def test_no_alarm_events_means_the_breach_is_unknown(open_incident):
    from investigations.models import TimelineEvent

    TimelineEvent.objects.filter(kind="alarm").delete()
    impact = load_document(open_incident)["impact"]
    assert impact["breach_s"] is None and impact["affected_requests"] is None
    assert impact["affected_note"].startswith("unknown")
