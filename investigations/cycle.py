"""After each poll cycle: evaluate the deployment's open investigations and put what
changed on their timelines (the alarm firing or clearing, a suggestion that changed).

Auto-apply rules (a playbook node's ``auto``) turn a suggestion that held for the
given number of consecutive cycles into an automatic decision, marked as such, with
the evidence frozen like a person's.

Idempotent per (investigation, cycle): the evaluation claims the cycle with a
conditional UPDATE inside the same transaction that writes its events, so a
redelivered poll task writes nothing twice.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import NamedTuple

from django.db import transaction
from django.db.models import Q

from investigations import actions, fixplans, live
from investigations.choices import (
    DecisionAction,
    EventKind,
    IncidentStatus,
    NodeState,
    Suggestion,
    VerificationState,
)
from investigations.evaluation import NodeResult
from investigations.evidence import frozen_evidence
from investigations.models import Investigation
from investigations.timeline import record_event

log = logging.getLogger(__name__)


class Event(NamedTuple):
    """A timeline event the cycle will write (``record_event``) once its walk is done."""

    kind: EventKind
    summary: str
    data: dict


def evaluate_after_poll(deployment_id, cycle: datetime) -> int:
    """Returns how many timeline events were written."""
    written = 0
    ids = list(
        Investigation.objects.filter(
            deployment_id=deployment_id, status=Investigation.Status.OPEN
        ).values_list("pk", flat=True)
    )
    for investigation_id in ids:
        try:
            written += _evaluate_one(investigation_id, cycle)
        except Exception:
            # The poll is stored either way; a broken evaluation must be visible, not fatal.
            log.exception("investigation.evaluate.failed", extra={"id": str(investigation_id)})
    return written


@transaction.atomic
def _evaluate_one(investigation_id, cycle: datetime) -> int:
    written = 0
    claimed = Investigation.objects.filter(
        Q(last_evaluated_at__isnull=True) | Q(last_evaluated_at__lt=cycle), pk=investigation_id
    ).update(last_evaluated_at=cycle)
    if not claimed:
        return 0
    investigation = Investigation.objects.select_related("deployment").get(pk=investigation_id)
    state = live.current_state(investigation, now=cycle, gate=False, stable=False)
    events: list[Event] = []
    firing = state.result.alarm.firing
    if firing is not None and firing != investigation.alarm_firing:
        alarm = state.result.alarm
        verb = "firing" if firing else "clear"
        events.append(
            Event(
                EventKind.ALARM,
                f"Alarm {verb}: {alarm.measured:.4g} against {alarm.threshold:.4g}",
                {"firing": firing, "measured": alarm.measured, "threshold": alarm.threshold},
            )
        )
    suggestions: dict = {}
    streaks: dict[str, int] = {}
    previous_streaks = investigation.last_suggestions.get("_streaks", {})
    automatic: list[NodeResult] = []
    stack = list(state.result.nodes)
    while stack:
        node = stack.pop()
        suggestions[node.key] = node.suggestion
        stack.extend(node.children)
        before = investigation.last_suggestions.get(node.key, Suggestion.INCONCLUSIVE)
        streaks[node.key] = (
            previous_streaks.get(node.key, 0) + 1 if node.suggestion == before else 1
        )
        needed = state.playbook.node(node.key).auto.get(node.suggestion)
        if needed and node.state == NodeState.OPEN and streaks[node.key] >= needed:
            automatic.append(node)
        if node.suggestion != before and node.state == NodeState.OPEN:
            reasons = "; ".join(f"{c.title}: {c.reason}" for c in node.checks)
            events.append(
                Event(
                    EventKind.SUGGESTION,
                    f"Evidence suggests {node.suggestion} {node.key} ({reasons})",
                    {"node": node.key, "suggestion": node.suggestion},
                )
            )
    verification = _verification_event(investigation, state)
    if verification is not None:
        events.append(verification)
    for kind, summary, data in events:
        record_event(investigation, kind, actor=None, summary=summary, data=data)
    if verification is not None and verification.data["state"] == VerificationState.PASSING:
        actions.follow_status(
            investigation=investigation,
            status=IncidentStatus.RESOLVED,
            because=f"verification of {state.fix.key} passing",
        )
    for node in automatic:
        written += _auto_decide(investigation, node, streaks[node.key])
    suggestions["_streaks"] = streaks
    # Fix parameters settle over recent cycles: what the page shows and the record keeps.
    suggestions["_fix"] = fixplans.remember(
        investigation.last_suggestions.get("_fix"), state.result
    )
    if state.verification is not None:
        # The home page lists every open investigation; it reads this instead of
        # evaluating each one (the fix it is about, so a newer fix starts as pending).
        suggestions["_verification"] = {
            "fix": str(state.fix.pk),
            "state": state.verification.state,
        }
    Investigation.objects.filter(pk=investigation.pk).update(
        last_suggestions=suggestions,
        alarm_firing=firing if firing is not None else investigation.alarm_firing,
    )
    return written + len(events)


def _verification_event(investigation: Investigation, state) -> Event | None:
    """A verification state change of the latest fix, as a timeline event: the moment it
    first passes is the team's "verified fix" time (review statistics read it)."""
    if state.verification is None:
        return None
    before = investigation.last_suggestions.get("_verification") or {}
    now_state = state.verification.state
    if before.get("fix") == str(state.fix.pk) and before.get("state") == now_state:
        return None
    if before.get("fix") != str(state.fix.pk) and now_state == VerificationState.PENDING:
        return None  # a fresh fix starts pending; recording the fix already said so
    failing = [c.title for c in state.verification.criteria if c.holds is False]
    named = failing and now_state == VerificationState.FAILING
    detail = f" ({'; '.join(failing)} not holding)" if named else ""
    if now_state == VerificationState.UNATTRIBUTABLE:
        detail = f": {state.verification.note}"
    return Event(
        EventKind.VERIFICATION,
        f"Verification of {state.fix.key} {now_state}{detail}",
        {"fix": str(state.fix.pk), "state": now_state},
    )


def _auto_decide(investigation: Investigation, node: NodeResult, cycles: int) -> int:
    action = {
        Suggestion.CONFIRM: DecisionAction.CONFIRM,
        Suggestion.ELIMINATE: DecisionAction.ELIMINATE,
    }[node.suggestion]
    reasons = "; ".join(f"{c.title}: {c.reason}" for c in node.checks)
    try:
        actions.decide(
            investigation=investigation,
            node=node.key,
            action=action,
            reason=f"Automatic ({cycles} consecutive cycles): {reasons}"[:4000],
            user=None,
            evidence=frozen_evidence(node),
            expected_state=NodeState.OPEN,
            automatic=True,
        )
    except actions.DecisionConflict:
        return 0  # a person decided first: people win
    except actions.InvestigationClosed:
        return 0  # closed while this cycle ran: the frozen record stays as it was
    return 1
