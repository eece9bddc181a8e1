"""Each poll cycle evaluates open investigations; what changed lands on the timeline once."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from investigations import actions
from investigations.models import TimelineEvent
from investigations.tasks import poll_and_evaluate
from tests.support import builders


def _advance(base: str, seconds: float) -> None:
    request = urllib.request.Request(  # noqa: S310 - loopback
        f"{base}/control/advance?seconds={seconds}", data=b"", method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
        json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_the_alarm_and_the_suggestions_reach_the_timeline_once(team, commander):
    server = SimServer(
        SimDeployment("long-prefill-itl", seed=0, clock=SimClock("manual"))
    ).start_in_thread()
    base = f"http://127.0.0.1:{server.ports['main']}"
    deployment = builders.deployment(team, "atlas-sim")
    # The engine log, followed from its start: a V1 engine says its chunk budget there
    # and nowhere else (its /metrics count prompts whole).
    builders.targets(deployment, base, ("engine", "dcgm", "log_http"))
    investigation = actions.open_investigation(
        deployment=deployment, symptom="itl-spikes", user=commander
    )
    start = datetime.now(tz=UTC).replace(microsecond=0) + timedelta(minutes=1)
    try:
        cycles = [start + timedelta(seconds=15 * n) for n in range(6)]
        for cycle in cycles:
            _advance(base, 15)
            poll_and_evaluate.apply(args=[str(deployment.pk), cycle.isoformat()])
        before = TimelineEvent.objects.count()
        poll_and_evaluate.apply(args=[str(deployment.pk), cycles[-1].isoformat()])  # redelivery
        assert TimelineEvent.objects.count() == before
    finally:
        server.stop()
    events = list(investigation.timeline.values_list("kind", "summary"))
    assert any(s.startswith("Alarm firing") for k, s in events if k == "alarm")
    # What the record reads is the event's data, never its wording.
    alarms = investigation.timeline.filter(kind="alarm").values_list("data", flat=True)
    assert alarms and alarms[0]["firing"] is True and alarms[0]["threshold"] > 0
    suggestion = investigation.timeline.filter(
        kind="suggestion", data__node="oversized-prefill-chunks"
    ).get()
    assert suggestion.data["suggestion"] == "confirm"
    suggested = [s for k, s in events if k == "suggestion"]
    assert any("suggests confirm oversized-prefill-chunks" in s for s in suggested)
    assert any("suggests eliminate tp-straggler" in s for s in suggested)
    # One event per change, not one per cycle.
    assert sum("oversized-prefill-chunks" in s for s in suggested) == 1


@pytest.mark.django_db(transaction=True)
def test_auto_apply_rules_decide_for_the_team_but_never_over_a_person(team, commander):
    """itl-spikes eliminates tp-straggler automatically after three cycles of clear
    evidence; its confirmations stay with people, and a person's decision is never
    overwritten."""
    server = SimServer(
        SimDeployment("long-prefill-itl", seed=0, clock=SimClock("manual"))
    ).start_in_thread()
    base = f"http://127.0.0.1:{server.ports['main']}"
    deployment = builders.deployment(team, "atlas-sim")
    builders.targets(deployment, base)
    auto = actions.open_investigation(deployment=deployment, symptom="itl-spikes", user=commander)
    manual = actions.open_investigation(deployment=deployment, symptom="itl-spikes", user=commander)
    actions.decide(
        investigation=manual,
        node="tp-straggler",
        action="confirm",
        reason="the on-call saw a hot GPU",
        user=commander,
        evidence={},
    )
    start = datetime.now(tz=UTC).replace(microsecond=0) + timedelta(minutes=1)
    try:
        for n in range(5):
            _advance(base, 15)
            cycle = start + timedelta(seconds=15 * n)
            poll_and_evaluate.apply(args=[str(deployment.pk), cycle.isoformat()])
    finally:
        server.stop()
    decisions = list(auto.decisions.values_list("node", "action", "automatic", "decided_by"))
    assert decisions == [("tp-straggler", "eliminate", True, None)]
    decision = auto.decisions.get()
    assert decision.reason.startswith("Automatic (3 consecutive cycles)")
    assert decision.evidence["checks"][0]["outcome"] == "eliminate"
    assert actions.node_states(auto)["tp-straggler"] == "eliminated"
    assert not auto.decisions.filter(node="oversized-prefill-chunks").exists()
    assert list(manual.decisions.values_list("node", "action", "automatic")) == [
        ("tp-straggler", "confirm", False)
    ]


@pytest.mark.django_db
def test_verification_changes_reach_the_timeline_once_per_change(team, commander):
    """A fresh fix starts pending (recording it said so); each later change of its state is
    one event, and a newer fix starts over."""
    from types import SimpleNamespace

    from investigations.cycle import _verification_event
    from investigations.models import FixRecord
    from investigations.verification import CriterionResult, VerificationResult

    deployment = builders.deployment(team, "verify")
    investigation = actions.open_investigation(
        deployment=deployment, symptom="itl-spikes", user=commander
    )
    fix = FixRecord.objects.create(investigation=investigation, node="n", key="chunk")
    ttft = CriterionResult("p95 TTFT", 900.0, 600.0, "<", False, False)

    def state(name, criteria=(), of=fix):
        return SimpleNamespace(fix=of, verification=VerificationResult(name, 60, 300, criteria))

    def step(s):
        event = _verification_event(investigation, s)
        investigation.last_suggestions["_verification"] = {
            "fix": str(s.fix.pk),
            "state": s.verification.state,
        }
        return event

    assert step(state("pending")) is None
    assert step(state("pending")) is None
    failing = step(state("failing", (ttft,)))
    assert failing.data == {"fix": str(fix.pk), "state": "failing"}
    assert "p95 TTFT not holding" in failing.summary
    assert step(state("failing", (ttft,))) is None
    assert step(state("passing")).data["state"] == "passing"
    newer = FixRecord.objects.create(investigation=investigation, node="n", key="seats")
    assert step(state("pending", of=newer)) is None
    assert step(state("passing", of=newer)).summary == "Verification of seats passing"
    assert _verification_event(investigation, SimpleNamespace(fix=None, verification=None)) is None
