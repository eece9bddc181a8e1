"""The live state of an investigation: its playbook evaluated over the stored
observations, with the latest fix's verification and regression gate. Used by the
pages, the API and the per-cycle evaluation task alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.cache import cache
from django.utils import timezone

from deployments.budget import Budget
from investigations import fixplans
from investigations.evaluation import Evaluation, evaluate
from investigations.gate import backtest
from investigations.models import FixRecord, Investigation
from investigations.observations import load_observations, signals_of
from investigations.playbook import Playbook, get_playbook
from investigations.states import node_states
from investigations.verification import VerificationResult, verification_signals, verify


@dataclass(frozen=True)
class LiveState:
    playbook: Playbook
    result: Evaluation
    fix: FixRecord | None
    verification: VerificationResult | None
    gate: dict | None
    # What evaluation read, for panels that show more of it (the budget panel).
    observations: Mapping = field(default_factory=dict)


def current_state(
    investigation: Investigation,
    now: datetime | None = None,
    *,
    extra_signals: Mapping[str, int] | None = None,
    gate: bool = True,
    reuse: bool = False,
    stable: bool = True,
) -> LiveState:
    """``extra_signals`` (name -> window seconds) ride along in the one observation read;
    ``gate=False`` skips the regression gate's backtest (the per-cycle evaluation never
    shows it); ``reuse`` lets the read come from one made a few seconds earlier when
    nothing was stored since (``load_observations``): the result is the same, and
    decisions, the fix and the evaluation itself are still read and computed at ``now``.
    Fix plans show the parameters the poll cycles settled on (``fixplans``); ``stable=False``
    gives this instant's raw ones (the cycle that settles them)."""
    playbook = get_playbook(investigation.symptom)
    now = now or timezone.now()
    fix = investigation.fixes.order_by("-applied_at").first()
    wanted = signals_of(playbook)
    for signal, window in (extra_signals or {}).items():
        wanted[signal] = max(window, wanted.get(signal, 0))
    if fix is not None:
        # One read for the tree and the verification: each reduces over its own window.
        since_fix = verification_signals(
            playbook.node(fix.node).fix,
            applied_at=fix.applied_at.timestamp(),
            now=now.timestamp(),
            alarm=playbook.alarm,
        )
        for signal, window in since_fix.items():
            wanted[signal] = max(window, wanted.get(signal, 0))
    observations = load_observations(investigation.deployment_id, wanted, now, reuse=reuse)
    result = evaluate(
        playbook,
        Budget.of(investigation.deployment),
        observations,
        now.timestamp(),
        decisions=node_states(investigation),
    )
    if stable:
        result = fixplans.stabilise(
            result,
            (investigation.last_suggestions or {}).get("_fix"),
            playbook,
            Budget.of(investigation.deployment),
            model=investigation.deployment.model_name,
        )
    verification = _verification(investigation, playbook, fix, observations, now)
    promoted = _gate(investigation, playbook, fix, now) if verification and gate else None
    return LiveState(playbook, result, fix, verification, promoted, observations)


def _gate(investigation, playbook, fix, now):
    """The backtest of the promoted signal over the investigation's record up to the fix.

    The record ends at the fix: after it the system is a different one, and a fix that
    came within the rule's ``for:`` means the rule would not have fired in this incident
    (windowed measurements still remember the incident for a while after the fix, which
    must not make it "fire" late). Replaying the record is the costliest part of the page,
    so the result is cached per poll cycle (``last_evaluated_at``) and fix.
    """
    if fix is None:
        return None
    node = playbook.node(fix.node)
    if node.fix is None or node.fix.alert is None:
        return None
    start = investigation.opened_at - timedelta(hours=1)
    end = max(start, min(now, fix.applied_at))
    cycle = investigation.last_evaluated_at
    key = (
        f"atlas:gate:{investigation.pk}:{fix.pk}:{end.timestamp():.3f}:"
        f"{cycle.timestamp() if cycle else 'none'}"
    )
    result = cache.get(key)
    if result is None:
        # Only what the replay reads: the node's confirming checks and the alarm.
        measures = [c.measure for c in node.checks if c.confirm is not None]
        measures.append(playbook.alarm.measure)
        signals = {m.signal: int((end - start).total_seconds()) + 1 for m in measures}
        observations = load_observations(investigation.deployment_id, signals, end)
        result = backtest(
            playbook,
            node,
            Budget.of(investigation.deployment),
            observations,
            start=start.timestamp(),
            end=end.timestamp(),
            step=max(15.0, (end - start).total_seconds() / 400),
        )
        cache.set(key, result, timeout=3600)
    return {"alert": node.fix.alert, "backtest": result, "fix_at": fix.applied_at}


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
        alarm=playbook.alarm,
    )
