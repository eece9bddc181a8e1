"""Changes to investigations: each action is one transaction with its side effects."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from deployments.models import Deployment
from investigations import frozen, history
from investigations.choices import (
    SINGLE_HOLDER_ROLES,
    STATE_AFTER,
    STATUS_RANK,
    DecisionAction,
    EventKind,
    IncidentRole,
    IncidentStatus,
    NodeState,
    Severity,
    VerificationState,
)
from investigations.models import Decision, FixRecord, Investigation, RoleAssignment
from investigations.playbook import get_playbook
from investigations.states import node_states
from investigations.timeline import record_event
from probes.models import Target, TargetKind
from teams.models import Membership, Role


@transaction.atomic
def open_investigation(
    *,
    deployment: Deployment,
    symptom: str,
    user: Actor | Any | None,
    title: str = "",
    fingerprint: str = "",
    opened_by_text: str = "",
) -> Investigation:
    """Open an investigation from a symptom. Its playbook's PromQL (and the engine signals
    Prometheus stands in for) is installed on the deployment's Prometheus targets, so the
    next poll cycle already collects it; polling
    itself starts because the deployment now has an open investigation.

    ``user`` is the ``Actor`` (a user or None is taken as one); ``opened_by_text`` names
    the opener when it is not the actor's own name (an alert)."""
    playbook = get_playbook(symptom)
    actor = Actor.of(user)
    who = (opened_by_text or actor.name)[:200]
    investigation = Investigation.objects.create(
        team=deployment.team,
        deployment=deployment,
        symptom=symptom,
        title=title or f"{playbook.title} on {deployment.name}",
        opened_by=actor.user,
        opened_by_name=who,
        alert_fingerprint=fingerprint,
        playbook_version=playbook.version,
        playbook_digest=playbook.digest,
        playbook_facts=frozen.playbook_facts(playbook),
    )
    record_event(
        investigation,
        EventKind.OPENED,
        actor=actor if actor.is_person else Actor(None, who),
        summary=f"Opened from symptom {symptom} by {who}",
        data={"opened_by": who, "symptom": symptom, "fingerprint": fingerprint},
        audit_summary=f"Opened {investigation.title} ({symptom})",
        audit_data={"symptom": symptom, "fingerprint": fingerprint},
    )
    if actor.is_person:
        # The person who opens it commands it until they hand over (the opening event says
        # who; no event of its own).
        RoleAssignment.objects.create(
            investigation=investigation,
            role=IncidentRole.COMMANDER,
            user=actor.user,
            user_name=actor.name[:200],
        )
    # With the engine signals Prometheus stands in for (history.prometheus_queries).
    queries = {s: promql for s, (promql, _) in history.prometheus_queries(playbook).items()}
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


class InvestigationClosed(ValueError):
    """A change to a closed investigation: its record is frozen at the close (issue 19.10)."""

    def __init__(self, what: str = "changed") -> None:
        super().__init__(f"this investigation is closed: its record is frozen and cannot be {what}")


@transaction.atomic
def decide(
    *,
    investigation: Investigation,
    node: str,
    action: str,
    reason: str,
    user: Actor | Any | None,
    evidence: dict,
    expected_state: str | None = None,
    automatic: bool = False,
) -> Decision:
    """Record a decision with its frozen evidence and a timeline event.

    Locks the investigation row, so two commanders deciding at once are serialised;
    ``expected_state`` (the state the person saw) turns a silent overwrite into a
    ``DecisionConflict`` the second person is told about. ``user`` is the ``Actor``: a
    person, an API token (``Actor.for_token``), or None for the automatic rule.
    """
    actor = Actor.of(user, name="automatic rule" if automatic else "")
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise InvestigationClosed("decided on")
    playbook = get_playbook(locked.symptom)
    try:
        playbook.node(node)
    except KeyError:
        raise ValueError(f"{node!r} is not a hypothesis of this playbook") from None
    if action not in STATE_AFTER:
        raise ValueError(f"unknown action {action!r}")
    if not reason.strip():
        raise ValueError("a decision needs a reason")
    current = node_states(locked).get(node, NodeState.OPEN)
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
        decided_by=actor.user,
        sequence=sequence,
    )
    record_event(
        locked,
        EventKind.DECISION,
        actor=actor,
        summary=f"{action} {node}: {reason.strip()[:300]}",
        data={"decision": str(decision.pk), "node": node, "action": action, "automatic": automatic},
        obj=decision,
        audit_data={"node": node, "action": action, "automatic": automatic},
    )
    if action == DecisionAction.CONFIRM and playbook.node(node).is_cause:
        _follow_status(locked, IncidentStatus.IDENTIFIED, f"root cause {node} confirmed")
    return decision


def fix_refusal(investigation: Investigation, node: str) -> str | None:
    """Why ``node``'s fix cannot be recorded now (None: it can). Read before an engine
    controller applies it, and again under the lock when it is recorded."""
    if investigation.status != Investigation.Status.OPEN:
        return "this investigation is closed"
    hypothesis = get_playbook(investigation.symptom).node(node)
    if hypothesis.fix is None:
        return f"{node} has no fix template"
    if node_states(investigation).get(node) != NodeState.CONFIRMED:
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
    user: Actor | Any | None,
    note: str = "",
    applied_through: str = "",
) -> FixRecord:
    """Record that a confirmed cause's fix was applied (once per cause); verification
    starts now. ``applied_through`` says which engine controller applied it
    (investigations.controllers), when Atlas did."""
    actor = Actor.of(user)
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise InvestigationClosed("given a fix")
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
        applied_by=actor.user,
    )
    shown = ", ".join(f"{k}={v:g}" for k, v in parameters.items()) or "no parameters"
    through = f" {applied_through}" if applied_through else ""
    # Only a fix Atlas applied says through what; a recorded one keeps the old shape.
    applied = {"applied_through": applied_through} if applied_through else {}
    record_event(
        locked,
        EventKind.FIX,
        actor=actor,
        summary=f"Applied {hypothesis.fix.key} for {node} ({shown}){through}",
        data={
            "fix": str(fix.pk),
            "node": node,
            "key": hypothesis.fix.key,
            "parameters": parameters,
            **applied,
        },
        obj=fix,
        audit_summary=f"Applied {hypothesis.fix.key} for {node} ({shown})",
        audit_data={"node": node, "key": hypothesis.fix.key, "parameters": parameters, **applied},
    )
    _follow_status(locked, IncidentStatus.MONITORING, f"fix {hypothesis.fix.key} recorded")
    return fix


@transaction.atomic
def close_investigation(
    *, investigation: Investigation, user: Actor | Any | None, override: str = ""
) -> Investigation:
    """Close as resolved. The close judges the latest fix's verification itself, as of
    now, and freezes it with the regression gate's backtest and the chart (the record the
    postmortem is rendered from); without a passing verification a commander must say
    why, and the override is kept and shown in the postmortem."""
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise ValueError("this investigation is already closed")
    now = timezone.now()
    facts = frozen.closing_facts_of(locked, now)
    verification_state = (facts["verification"] or {}).get("state", VerificationState.NONE)
    passed = verification_state == VerificationState.PASSING
    if not passed and not override.strip():
        raise ValueError("verification has not passed: give a reason to close anyway")
    fix = locked.fixes.order_by("-applied_at").first()
    locked.status = Investigation.Status.CLOSED
    locked.closed_at = now
    locked.root_cause = fix.node if fix else ""
    locked.close_override = override.strip() if not passed else ""
    locked.closing_facts = facts
    locked.save(
        update_fields=["status", "closed_at", "root_cause", "close_override", "closing_facts"]
    )
    # Resolved first, so the close stays the record's last event.
    _follow_status(locked, IncidentStatus.RESOLVED, "closed")
    summary = (
        "Closed: verification passed"
        if not locked.close_override
        else (f"Closed with override: {locked.close_override[:300]}")
    )
    record_event(
        locked,
        EventKind.CLOSED,
        actor=user,
        summary=summary,
        data={
            "verification": verification_state,
            "root_cause": locked.root_cause,
            "override": bool(locked.close_override),
        },
        audit_data={"verification": verification_state, "root_cause": locked.root_cause},
    )
    return locked


@transaction.atomic
def set_severity(
    *, investigation: Investigation, severity: str, reason: str, user: Actor | Any | None
) -> Investigation:
    """Set or change the severity. A change (from one SEV to another) needs a reason, and
    both go on the timeline, so the postmortem shows why the incident was re-graded."""
    try:
        new = Severity(severity)
    except ValueError:
        raise ValueError(f"unknown severity {severity!r}") from None
    reason = reason.strip()[:1000]
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise InvestigationClosed("re-graded")
    previous = locked.severity
    if previous == new:
        raise ValueError(f"the severity is already {new.label}")
    if previous and not reason:
        raise ValueError("changing the severity needs a reason")
    locked.severity = new
    locked.save(update_fields=["severity"])
    was = f" (was {Severity(previous).label})" if previous else ""
    record_event(
        locked,
        EventKind.SEVERITY,
        actor=user,
        data={"severity": str(new), "previous": previous, "reason": reason},
        summary=f"Severity {new.label}{was}" + (f": {reason}" if reason else ""),
    )
    investigation.severity = new
    return locked


# --- Incident status ------------------------------------------------------------------------


def _follow_status(locked: Investigation, target: IncidentStatus, because: str) -> bool:
    """Move the status forward to ``target`` after what the record just said (a confirmed
    cause, a recorded fix, a passing verification, the close), as an automatic event. Never
    backwards: a commander who set it further on (or back) is not overruled by an older
    fact. ``locked`` is the row the caller holds the lock on."""
    current = IncidentStatus(locked.incident_status)
    if STATUS_RANK[target] <= STATUS_RANK[current]:
        return False
    locked.incident_status = target
    locked.save(update_fields=["incident_status"])
    record_event(
        locked,
        EventKind.STATUS,
        actor=None,
        data={
            "status": str(target),
            "previous": str(current),
            "reason": because,
            "automatic": True,
        },
        summary=f"Status {target.label} (was {current.label}): {because}",
    )
    return True


@transaction.atomic
def follow_status(*, investigation: Investigation | Any, status: str, because: str) -> bool:
    """``_follow_status`` for callers outside an action (the poll cycle's verification):
    locks the row; a closed investigation is left as it closed."""
    pk = getattr(investigation, "pk", investigation)
    locked = Investigation.objects.select_for_update().get(pk=pk)
    if locked.status != Investigation.Status.OPEN:
        return False
    return _follow_status(locked, IncidentStatus(status), because)


def commander_id(investigation: Investigation | Any) -> Any:
    """The incident commander's user id (None: nobody holds command)."""
    pk = getattr(investigation, "pk", investigation)
    return (
        RoleAssignment.objects.filter(
            investigation_id=pk, role=IncidentRole.COMMANDER, ended_at__isnull=True
        )
        .values_list("user_id", flat=True)
        .first()
    )


def command_refusal(membership: Membership | None, commander: Any) -> str | None:
    """Why this member may not set the status or assign roles (None: they may): that is for
    the team's commanders and the investigation's incident commander (``commander``: the
    incident commander's user id, see ``commander_id``)."""
    if membership is not None and (
        membership.allows(Role.COMMANDER)
        or (
            membership.allows(Role.RESPONDER)
            and commander is not None
            and membership.user_id == commander
        )
    ):
        return None
    return "only the incident commander or a team commander may do this"


@transaction.atomic
def set_status(
    *, investigation: Investigation, status: str, reason: str, user: Actor | Any | None
) -> Investigation:
    """A commander sets the incident status, either way, with a reason: both on the timeline
    and in the audit log. The automatic following goes on from wherever they set it."""
    try:
        new = IncidentStatus(status)
    except ValueError:
        raise ValueError(f"unknown status {status!r}") from None
    reason = reason.strip()[:1000]
    if not reason:
        raise ValueError("changing the status needs a reason")
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise InvestigationClosed("given another status")
    previous = IncidentStatus(locked.incident_status)
    if previous == new:
        raise ValueError(f"the status is already {new.label.lower()}")
    locked.incident_status = new
    locked.save(update_fields=["incident_status"])
    record_event(
        locked,
        EventKind.STATUS,
        actor=user,
        data={"status": str(new), "previous": str(previous), "reason": reason, "automatic": False},
        summary=f"Status {new.label} (was {previous.label}): {reason}",
    )
    investigation.incident_status = new
    return locked


# --- Incident roles ---------------------------------------------------------------------------


def assignable_members(investigation: Investigation):
    """Who may hold an incident role: the team's members who may act in it (responders and
    commanders; a viewer could not do the job)."""
    return (
        Membership.objects.filter(
            team_id=investigation.team_id, role__in=[Role.RESPONDER, Role.COMMANDER]
        )
        .select_related("user")
        .order_by("user__username")
    )


@transaction.atomic
def assign_role(
    *,
    investigation: Investigation,
    role: str,
    username: str,
    reason: str,
    user: Actor | Any | None,
) -> RoleAssignment:
    """Give ``role`` to a member of the investigation's team. Giving a one-holder role
    (commander, scribe, communications lead) to someone else ends the current holder's: for
    the commander that is a handover, which needs a reason. Both go on the timeline and in
    the audit log."""
    try:
        new_role = IncidentRole(role)
    except ValueError:
        raise ValueError(f"unknown role {role!r}") from None
    reason = reason.strip()[:1000]
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise InvestigationClosed("given new roles")
    member = assignable_members(locked).filter(user__username=username).first()
    if member is None:
        raise ValueError(f"{username or 'nobody'} is not a responder or commander of this team")
    current = RoleAssignment.objects.select_for_update().filter(
        investigation=locked, role=new_role, ended_at__isnull=True
    )
    if current.filter(user=member.user).exists():
        raise ValueError(f"{username} is already {new_role.label.lower()}")
    previous = ""
    if new_role in SINGLE_HOLDER_ROLES:
        held = current.first()
        if held is not None:
            previous = held.shown_name
            held.ended_at = timezone.now()
            held.save(update_fields=["ended_at"])
    handover = new_role == IncidentRole.COMMANDER and bool(previous)
    if handover and not reason:
        raise ValueError("a handover of command needs a reason")
    assignment = RoleAssignment.objects.create(
        investigation=locked, role=new_role, user=member.user, user_name=username[:200]
    )
    op = "handover" if handover else "assign"
    if handover:
        summary = f"Command handed over from {previous} to {username}"
    else:
        was = f" (was {previous})" if previous else ""
        summary = f"{new_role.label}: {username}{was}"
    record_event(
        locked,
        EventKind.ROLE,
        actor=user,
        data={
            "role": str(new_role),
            "user": username,
            "previous": previous,
            "op": op,
            "reason": reason,
        },
        summary=summary + (f": {reason}" if reason else ""),
        obj=assignment,
    )
    return assignment


@transaction.atomic
def release_role(
    *,
    investigation: Investigation,
    role: str,
    username: str,
    reason: str,
    user: Actor | Any | None,
) -> RoleAssignment:
    """End someone's role (a responder who went off shift). The commander is never left
    empty this way: command is handed over, not dropped."""
    try:
        old_role = IncidentRole(role)
    except ValueError:
        raise ValueError(f"unknown role {role!r}") from None
    if old_role == IncidentRole.COMMANDER:
        raise ValueError("command is handed over to someone, not released")
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise InvestigationClosed("given new roles")
    held = (
        RoleAssignment.objects.select_for_update()
        .filter(investigation=locked, role=old_role, ended_at__isnull=True)
        .filter(user__username=username)
        .first()
    )
    if held is None:
        raise ValueError(f"{username or 'nobody'} is not {old_role.label.lower()}")
    held.ended_at = timezone.now()
    held.save(update_fields=["ended_at"])
    reason = reason.strip()[:1000]
    record_event(
        locked,
        EventKind.ROLE,
        actor=user,
        data={
            "role": str(old_role),
            "user": "",
            "previous": held.shown_name,
            "op": "release",
            "reason": reason,
        },
        summary=f"{old_role.label} {held.shown_name} released" + (f": {reason}" if reason else ""),
        obj=held,
    )
    return held
