"""The live state of an investigation: its playbook evaluated over the stored
observations, with the latest fix's verification and regression gate. Used by the
pages, the API and the per-cycle evaluation task alike."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from investigations import actions
from investigations.budget import Budget
from investigations.evaluation import Evaluation, evaluate
from investigations.gate import backtest
from investigations.models import FixRecord, Investigation
from investigations.observations import load_observations, signals_of
from investigations.playbook import Playbook, get_playbook
from investigations.verification import VerificationResult, verification_signals, verify


@dataclass(frozen=True)
class LiveState:
    playbook: Playbook
    result: Evaluation
    fix: FixRecord | None
    verification: VerificationResult | None
    gate: dict | None


def current_state(investigation: Investigation, now: datetime | None = None) -> LiveState:
    playbook = get_playbook(investigation.symptom)
    now = now or timezone.now()
    fix = investigation.fixes.order_by("-applied_at").first()
    wanted = signals_of(playbook)
    if fix is not None:
        # One read for the tree and the verification: each reduces over its own window.
        since_fix = verification_signals(
            playbook.node(fix.node).fix, applied_at=fix.applied_at.timestamp(), now=now.timestamp()
        )
        for signal, window in since_fix.items():
            wanted[signal] = max(window, wanted.get(signal, 0))
    observations = load_observations(investigation.deployment_id, wanted, now)
    result = evaluate(
        playbook,
        Budget.of(investigation.deployment),
        observations,
        now.timestamp(),
        decisions=actions.node_states(investigation),
    )
    verification = _verification(investigation, playbook, fix, observations, now)
    gate = _gate(investigation, playbook, fix, now) if verification else None
    return LiveState(playbook, result, fix, verification, gate)


def _gate(investigation, playbook, fix, now):
    """The backtest of the promoted signal over the investigation's own record."""
    if fix is None:
        return None
    node = playbook.node(fix.node)
    if node.fix is None or node.fix.alert is None:
        return None
    start = investigation.opened_at - timedelta(hours=1)
    signals = {m.signal: int((now - start).total_seconds()) for m in playbook.measures()}
    observations = load_observations(investigation.deployment_id, signals, now)
    result = backtest(
        playbook,
        node,
        Budget.of(investigation.deployment),
        observations,
        start=start.timestamp(),
        end=now.timestamp(),
        step=max(15.0, (now - start).total_seconds() / 400),
    )
    return {"alert": node.fix.alert, "backtest": result}


def _verification(investigation, playbook, fix, observations, now):
    if fix is None:
        return None
    return verify(
        playbook.node(fix.node).fix,
        Budget.of(investigation.deployment),
        observations,
        applied_at=fix.applied_at.timestamp(),
        now=now.timestamp(),
        params=fix.parameters,
    )
