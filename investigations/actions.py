"""Changes to investigations: each action is one transaction with its side effects."""

from __future__ import annotations

from functools import partial

from django.db import transaction
from django.utils import timezone

import audit
from deployments.models import Deployment
from investigations import frozen, history
from investigations.models import Decision, FixRecord, Investigation, TimelineEvent
from investigations.playbook import get_playbook
from investigations.states import STATE_AFTER, node_states
from probes.models import Target, TargetKind


@transaction.atomic
def open_investigation(
    *,
    deployment: Deployment,
    symptom: str,
    user,
    title: str = "",
    fingerprint: str = "",
    opened_by_text: str = "",
) -> Investigation:
    """Open an investigation from a symptom. Its playbook's PromQL is installed on the
    deployment's Prometheus targets, so the next poll cycle already collects it; polling
    itself starts because the deployment now has an open investigation."""
    playbook = get_playbook(symptom)
    who = (opened_by_text or (user.get_username() if user else "automation"))[:200]
    investigation = Investigation.objects.create(
        team=deployment.team,
        deployment=deployment,
        symptom=symptom,
        title=title or f"{playbook.title} on {deployment.name}",
        opened_by=user,
        opened_by_name=who,
        alert_fingerprint=fingerprint,
        playbook_version=playbook.version,
        playbook_digest=playbook.digest,
        playbook_facts=frozen.playbook_facts(playbook),
    )
    TimelineEvent.objects.create(
        investigation=investigation,
        kind="opened",
        actor=user,
        summary=f"Opened from symptom {symptom} by {who}",
        data={"opened_by": who},
    )
    audit.record(
        "investigation.open",
        actor=user,
        actor_name=who,
        investigation=investigation,
        obj=investigation,
        summary=f"Opened {investigation.title} ({symptom})",
        data={"symptom": symptom, "fingerprint": fingerprint},
    )
    queries = {m.signal: m.promql for m in playbook.measures() if m.source == "prometheus"}
    if queries:
        installed = 0
        for target in Target.objects.select_for_update().filter(
            deployment=deployment, kind=TargetKind.PROMETHEUS
        ):
            target.queries = {**(target.queries or {}), **queries}
            target.save(update_fields=["queries"])
            installed += 1
        if installed:
            # The minutes before the open, from Prometheus's history (investigations.history).
            transaction.on_commit(partial(history.schedule, investigation.pk))
    return investigation


class DecisionConflict(Exception):
    """Someone decided on the same hypothesis since this person loaded the page."""


@transaction.atomic
def decide(
    *,
    investigation: Investigation,
    node: str,
    action: str,
    reason: str,
    user,
    evidence: dict,
    expected_state: str | None = None,
    automatic: bool = False,
) -> Decision:
    """Record a decision with its frozen evidence and a timeline event.

    Locks the investigation row, so two commanders deciding at once are serialised;
    ``expected_state`` (the state the person saw) turns a silent overwrite into a
    ``DecisionConflict`` the second person is told about.
    """
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    playbook = get_playbook(locked.symptom)
    try:
        playbook.node(node)
    except KeyError:
        raise ValueError(f"{node!r} is not a hypothesis of this playbook") from None
    if action not in STATE_AFTER:
        raise ValueError(f"unknown action {action!r}")
    if not reason.strip():
        raise ValueError("a decision needs a reason")
    current = node_states(locked).get(node, "open")
    if expected_state is not None and current != expected_state:
        last = locked.decisions.filter(node=node).order_by("-sequence").first()
        who = last.decided_by.get_username() if last and last.decided_by else "someone"
        raise DecisionConflict(f"{who} already set {node} to {current}; reload and decide again")
    if STATE_AFTER[action] == current:
        raise DecisionConflict(f"{node} is already {current}")
    sequence = locked.decisions.count() + 1
    decision = Decision.objects.create(
        investigation=locked,
        node=node,
        action=action,
        reason=reason.strip(),
        evidence=evidence,
        automatic=automatic,
        decided_by=user,
        sequence=sequence,
    )
    TimelineEvent.objects.create(
        investigation=locked,
        kind="decision",
        actor=user,
        summary=f"{action} {node}: {reason.strip()[:300]}",
        data={"decision": str(decision.pk), "node": node, "action": action},
    )
    audit.record(
        "decision",
        actor=user,
        actor_name="automatic rule" if automatic else "API token",
        investigation=locked,
        obj=decision,
        summary=f"{action} {node}: {reason.strip()[:300]}",
        data={"node": node, "action": action, "automatic": automatic},
    )
    return decision


def fix_refusal(investigation: Investigation, node: str) -> str | None:
    """Why ``node``'s fix cannot be recorded now (None: it can). Read before an engine
    controller applies it, and again under the lock when it is recorded."""
    if investigation.status != Investigation.Status.OPEN:
        return "this investigation is closed"
    hypothesis = get_playbook(investigation.symptom).node(node)
    if hypothesis.fix is None:
        return f"{node} has no fix template"
    if node_states(investigation).get(node) != "confirmed":
        return f"confirm {node} before recording its fix"
    if investigation.fixes.filter(node=node).exists():
        return f"the fix for {node} is already recorded"
    return None


@transaction.atomic
def record_fix(
    *,
    investigation: Investigation,
    node: str,
    parameters: dict,
    user,
    note: str = "",
    applied_through: str = "",
) -> FixRecord:
    """Record that a confirmed cause's fix was applied (once per cause); verification
    starts now. ``applied_through`` says which engine controller applied it
    (investigations.controllers), when Atlas did."""
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    refusal = fix_refusal(locked, node)
    if refusal:
        raise ValueError(refusal)
    hypothesis = get_playbook(locked.symptom).node(node)
    assert hypothesis.fix is not None  # fix_refusal said so
    fix = FixRecord.objects.create(
        investigation=locked,
        node=node,
        key=hypothesis.fix.key,
        parameters=parameters,
        note=note.strip(),
        applied_by=user,
    )
    shown = ", ".join(f"{k}={v:g}" for k, v in parameters.items()) or "no parameters"
    through = f" {applied_through}" if applied_through else ""
    TimelineEvent.objects.create(
        investigation=locked,
        kind="fix",
        actor=user,
        summary=f"Applied {hypothesis.fix.key} for {node} ({shown}){through}"[:500],
        data={"fix": str(fix.pk), "parameters": parameters, "applied_through": applied_through},
    )
    audit.record(
        "fix",
        actor=user,
        investigation=locked,
        obj=fix,
        summary=f"Applied {hypothesis.fix.key} for {node} ({shown})",
        data={
            "node": node,
            "key": hypothesis.fix.key,
            "parameters": parameters,
            "applied_through": applied_through,
        },
    )
    return fix


@transaction.atomic
def close_investigation(*, investigation: Investigation, user, override: str = "") -> Investigation:
    """Close as resolved. The close judges the latest fix's verification itself, as of
    now, and freezes it with the regression gate's backtest and the chart (the record the
    postmortem is rendered from); without a passing verification a commander must say
    why, and the override is kept and shown in the postmortem."""
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise ValueError("this investigation is already closed")
    now = timezone.now()
    facts = frozen.closing_facts_of(locked, now)
    verification_state = (facts["verification"] or {}).get("state", "none")
    if verification_state != "passing" and not override.strip():
        raise ValueError("verification has not passed: give a reason to close anyway")
    fix = locked.fixes.order_by("-applied_at").first()
    locked.status = Investigation.Status.CLOSED
    locked.closed_at = now
    locked.root_cause = fix.node if fix else ""
    locked.close_override = override.strip() if verification_state != "passing" else ""
    locked.closing_facts = facts
    locked.save(
        update_fields=["status", "closed_at", "root_cause", "close_override", "closing_facts"]
    )
    summary = (
        "Closed: verification passed"
        if not locked.close_override
        else (f"Closed with override: {locked.close_override[:300]}")
    )
    TimelineEvent.objects.create(investigation=locked, kind="closed", actor=user, summary=summary)
    audit.record(
        "investigation.close_override" if locked.close_override else "investigation.close",
        actor=user,
        investigation=locked,
        obj=locked,
        summary=summary,
        data={"verification": verification_state, "root_cause": locked.root_cause},
    )
    return locked
