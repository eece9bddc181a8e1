"""People decide; the evidence they saw is frozen with the decision; nobody's decision is
silently overwritten."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations import actions
from investigations.models import Decision, TimelineEvent
from probes.models import Observation
from tests.support import builders


@pytest.fixture
def investigation(team, commander, frozen_now):
    deployment = builders.deployment(team)
    engine = builders.target(deployment)
    values = {
        "kv_cache_usage": 0.94, "preemptions_rate": 0.08, "ttft_p95": 1.4, "requests_running": 40,
    }  # fmt: skip
    builders.observations(engine, values, at=frozen_now, count=10)
    return actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)


def _decide(client, investigation, node, action, reason="KV at 94 % with preemptions", seen="open"):
    return client.post(
        reverse("investigations:decide", args=[investigation.id]),
        {"node": node, "action": action, "reason": reason, "expected_state": seen},
    )


def test_a_responder_confirms_with_a_reason_and_the_evidence_is_frozen(
    client_for, responder, investigation
):
    response = _decide(client_for(responder), investigation, "kv-cache-pressure", "confirm")
    assert response.status_code == 302
    decision = Decision.objects.get()
    assert (decision.node, decision.action, decision.decided_by) == (
        "kv-cache-pressure", "confirm", responder,
    )  # fmt: skip
    frozen = {c["id"]: c["measured"] for c in decision.evidence["checks"]}
    assert frozen == {
        "kv-usage": 0.94,
        "preemption-rate": pytest.approx(0.08),
        "kv-held-by-running": 0.94,
    }
    # Later observations do not change what the decision was based on.
    Observation.objects.filter(signal="kv_cache_usage").update(value=0.10)
    decision.refresh_from_db()
    assert decision.evidence["checks"][0]["measured"] == 0.94
    kinds = list(TimelineEvent.objects.values_list("kind", flat=True).order_by("at", "pk"))
    # A confirmed root cause moves the status to identified (tests/investigations/test_status.py).
    assert kinds == ["opened", "decision", "status"]


def test_viewers_cannot_decide_and_outsiders_cannot_see(
    client_for, viewer, outsider, investigation
):
    assert (
        _decide(client_for(viewer), investigation, "router-latency", "eliminate").status_code == 403
    )
    assert (
        _decide(client_for(outsider), investigation, "router-latency", "eliminate").status_code
        == 404
    )
    assert not Decision.objects.exists()


@pytest.mark.parametrize(("node", "reason"), [("router-latency", ""), ("no-such-node", "because")])
def test_a_decision_needs_a_reason_and_a_real_hypothesis(
    client_for, commander, investigation, node, reason
):
    response = _decide(client_for(commander), investigation, node, "eliminate", reason=reason)
    assert response.status_code == 302
    assert not Decision.objects.exists()


def test_the_second_of_two_commanders_is_told_instead_of_overwriting(
    client_for, commander, responder, investigation
):
    # Both loaded the page while the node was open.
    _decide(client_for(commander), investigation, "router-latency", "eliminate")
    client = client_for(responder)
    response = _decide(client, investigation, "router-latency", "confirm", seen="open")
    assert Decision.objects.count() == 1
    page = client.get(response["Location"]).content.decode()
    assert "already set router-latency to eliminated" in page


def test_the_tree_follows_decisions_and_reopen_undoes_them(client_for, commander, investigation):
    client = client_for(commander)
    _decide(client, investigation, "kv-cache-pressure", "eliminate", reason="testing the override")
    assert actions.node_states(investigation) == {"kv-cache-pressure": "eliminated"}
    page = client.get(reverse("investigations:detail", args=[investigation.id])).content.decode()
    ranking = page[page.index('class="ranking"') :]
    assert ranking.index("kv-cache-pressure") > ranking.index("router-latency")
    _decide(client, investigation, "kv-cache-pressure", "reopen", seen="eliminated")
    assert actions.node_states(investigation) == {"kv-cache-pressure": "open"}
    assert list(Decision.objects.values_list("sequence", flat=True)) == [1, 2]


def _post(client, investigation, name, data):
    return client.post(reverse(f"investigations:{name}", args=[investigation.id]), data)


def test_a_fix_is_recorded_only_for_a_confirmed_cause(client_for, commander, investigation):
    from investigations.models import FixRecord

    client = client_for(commander)
    _post(client, investigation, "record_fix", {"node": "kv-cache-pressure"})
    assert not FixRecord.objects.exists()  # not confirmed yet
    _decide(client, investigation, "kv-cache-pressure", "confirm")
    _post(client, investigation, "record_fix", {"node": "kv-cache-pressure", "note": "rolled"})
    fix = FixRecord.objects.get()
    assert fix.key == "fewer-max-num-seqs" and fix.parameters["max_num_seqs"] > 0
    assert TimelineEvent.objects.filter(kind="fix").exists()
    page = client.get(reverse("investigations:detail", args=[investigation.id])).content.decode()
    assert "Verification of fewer-max-num-seqs" in page and "pending" in page


def test_closing_without_a_passing_verification_needs_a_commanders_reason(
    client_for, commander, responder, investigation
):
    assert _post(client_for(responder), investigation, "close", {}).status_code == 403
    client = client_for(commander)
    _post(client, investigation, "close", {"override": ""})
    investigation.refresh_from_db()
    assert investigation.status == "open"
    _post(client, investigation, "close", {"override": "Rolled back the deploy; no fix to verify"})
    investigation.refresh_from_db()
    assert investigation.status == "closed" and investigation.closed_at is not None
    assert investigation.close_override.startswith("Rolled back")
    assert TimelineEvent.objects.filter(kind="closed").exists()
    # Closed investigations take no more fixes.
    _decide(client, investigation, "kv-cache-pressure", "confirm")
    _post(client, investigation, "record_fix", {"node": "kv-cache-pressure"})
    assert not investigation.fixes.exists()


def test_the_gate_rule_is_downloadable_after_a_fix(
    client_for, commander, viewer, outsider, investigation
):
    client = client_for(commander)
    gate = reverse("investigations:gate", args=[investigation.id])
    assert client.get(gate).status_code == 404  # no fix yet
    _decide(client, investigation, "kv-cache-pressure", "confirm")
    _post(client, investigation, "record_fix", {"node": "kv-cache-pressure"})
    page = client.get(reverse("investigations:detail", args=[investigation.id])).content.decode()
    assert "Regression gate: AtlasKVCachePressure" in page
    response = client_for(viewer).get(gate)
    assert response.status_code == 200 and response["Content-Type"] == "application/yaml"
    assert b"AtlasKVCachePressure" in response.content
    assert str(investigation.id).encode() in response.content
    assert client_for(outsider).get(gate).status_code == 404
