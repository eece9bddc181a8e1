"""The postmortem document, built from the investigation's record: never typed twice.

``build_document`` is a pure function from plain data (``RecordInput``) to the document
every renderer reads (the HTML page, Markdown, PDF). ``load_document`` is the one thin
loader that reads the rows. People write only what the record cannot know (narrative
sections, action items); everything else here is derived from stored facts: the playbook
as the investigation opened with it (``Investigation.playbook_facts``: titles, rationale,
fix text, version), detection from its alarm and the opening event, impact from the
timeline's alarm firing/clear events, the tree from the decisions and their frozen
evidence, the fix from its FixRecord, and verification, the regression gate and the chart
from what the close action froze (``Investigation.closing_facts``). Editing a playbook or
changing the evaluation rewrites no closed postmortem. An open investigation's draft is
built from the same facts computed as of now (``investigations.frozen``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from investigations.choices import (
    ROLE_LABELS,
    SINGLE_HOLDER_ROLES,
    STATE_AFTER,
    DecisionAction,
    EventKind,
    IncidentRole,
    IncidentStatus,
    NodeState,
    Severity,
)
from investigations.gate import rules_yaml
from postmortems.models import LESSONS, SECTIONS

Point = tuple[float, float]

# The SLO the burn is stated against, until deployments carry their own: 99.9 % of the time
# within the alarm's target over 30 days, an error budget of 43 min 12 s.
SLO_OBJECTIVE = 0.999
SLO_WINDOW_S = 30 * 86_400
ERROR_BUDGET_S = round((1 - SLO_OBJECTIVE) * SLO_WINDOW_S)
_OPS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


@dataclass(frozen=True)
class RecordInput:
    """Everything the document is built from, already read from the database: plain
    data only (the playbook as frozen facts, not a live ``Playbook``)."""

    investigation: Mapping[str, Any]
    playbook: Mapping[str, Any]
    alarm_threshold: float | None
    timeline: Sequence[Mapping[str, Any]]
    decisions: Sequence[Mapping[str, Any]]
    fix: Mapping[str, Any] | None
    verification: Mapping[str, Any] | None
    verified_at: datetime
    gate: Mapping[str, Any] | None
    investigation_url: str = ""
    action_items: Sequence[Mapping[str, Any]] = ()
    version: Mapping[str, Any] | None = None
    alarm_series: Sequence[Sequence[Point]] = ()
    request_rate: Sequence[Sequence[Point]] = ()  # completed requests/s, one per engine
    window: tuple[datetime, datetime] | None = None


def build_document(data: RecordInput) -> dict:
    """The postmortem as plain data: dicts, lists, numbers, text and aware datetimes."""
    inv = data.investigation
    playbook = data.playbook
    end = inv["closed_at"] or data.verified_at
    breaches = alarm_breaches(data.timeline, end=end)
    tree = hypothesis_tree(playbook, data.decisions)
    return {
        "id": str(inv["id"]),
        "title": inv["title"],
        "symptom": inv["symptom"],
        "symptom_title": playbook["title"],
        "playbook": f"{playbook['key']} v{playbook['version']}",
        "deployment": inv["deployment"],
        "status": inv["status"],
        "is_drill": inv["is_drill"],
        "opened_at": inv["opened_at"],
        "opened_by": opened_by(inv, data.timeline),
        "closed_at": inv["closed_at"],
        "duration_s": (end - inv["opened_at"]).total_seconds(),
        "detection": detection(data, breaches),
        "impact": {
            **impact(breaches, data.request_rate),
            **sample_impact(data.alarm_series, data.playbook["alarm"]["op"], data.alarm_threshold),
        },
        "resolution": resolution(data),
        "timeline": [_event(e) for e in data.timeline],
        "severity": severity_section(inv, data.timeline),
        "incident_status": status_section(inv, data.timeline),
        "roles": roles_section(inv, data.timeline),
        "tree": tree,
        "eliminated": [n for n in tree if n["state"] == NodeState.ELIMINATED],
        "confirmed": [n for n in tree if n["state"] == NodeState.CONFIRMED],
        "root_cause": root_cause(inv, playbook, tree, data.fix),
        "fix": fix_section(playbook, data.fix),
        "verification": verification_section(data),
        "gate": gate_section(data),
        "action_items": [dict(item) for item in data.action_items],
        "narrative": narrative(data.version),
        "lessons": [s for s in narrative(data.version) if s["key"] in LESSONS],
        "version": _version_meta(data.version),
        "chart": chart_data(data, tree),
    }


def opened_by(inv: Mapping[str, Any], timeline: Sequence[Mapping[str, Any]] = ()) -> str:
    """A person's name, or what opened it (an alert, the API), as stored when it opened
    (``Investigation.opened_by_name``); never parsed back out of the timeline's wording."""
    return inv.get("opened_by_name") or inv.get("opened_by") or "automation"


def _label(choices: type[Severity] | type[IncidentStatus], value: Any) -> str:
    try:
        return choices(value).label
    except ValueError:
        return str(value or "")


def severity_section(inv: Mapping[str, Any], timeline: Sequence[Mapping[str, Any]]) -> dict:
    """The severity as it closed and every setting with its reason, from the timeline's
    severity events (their data, never their wording)."""
    changes = [
        {
            "at": e["at"],
            "severity": _label(Severity, (e.get("data") or {}).get("severity")),
            "previous": _label(Severity, (e.get("data") or {}).get("previous")),
            "reason": (e.get("data") or {}).get("reason", ""),
            "actor": e["actor"] or "automation",
        }
        for e in timeline
        if e["kind"] == EventKind.SEVERITY
    ]
    return {"current": _label(Severity, inv.get("severity")), "changes": changes}


def status_section(inv: Mapping[str, Any], timeline: Sequence[Mapping[str, Any]]) -> dict:
    """The incident status as it closed and its history: each move, by whom or after what,
    with its reason."""
    changes = []
    for e in timeline:
        if e["kind"] != EventKind.STATUS:
            continue
        data = e.get("data") or {}
        changes.append(
            {
                "at": e["at"],
                "status": _label(IncidentStatus, data.get("status")),
                "previous": _label(IncidentStatus, data.get("previous")),
                "reason": data.get("reason", ""),
                "automatic": bool(data.get("automatic")),
                "actor": "followed the record" if data.get("automatic") else e["actor"],
            }
        )
    current = _label(IncidentStatus, inv.get("incident_status") or IncidentStatus.INVESTIGATING)
    return {"current": current, "changes": changes}


def roles_section(inv: Mapping[str, Any], timeline: Sequence[Mapping[str, Any]]) -> dict:
    """Who held each incident role (at the close, or now) and every assignment, handover
    and release. The first commander is whoever opened it, when a person did."""
    holders: dict[str, list[str]] = {}
    history: list[dict] = []
    first = inv.get("opened_by") or ""
    if first:
        holders[IncidentRole.COMMANDER] = [first]
        history.append(
            {
                "at": inv["opened_at"],
                "role": ROLE_LABELS[IncidentRole.COMMANDER],
                "who": first,
                "op": "opened",
                "previous": "",
                "reason": "",
                "actor": first,
            }
        )
    for e in timeline:
        if e["kind"] != EventKind.ROLE:
            continue
        data = e.get("data") or {}
        role, who, previous = data.get("role", ""), data.get("user", ""), data.get("previous", "")
        held = holders.setdefault(role, [])
        if data.get("op") == "release":
            if previous in held:
                held.remove(previous)
        elif role in SINGLE_HOLDER_ROLES:
            holders[role] = [who]
        elif who not in held:
            held.append(who)
        history.append(
            {
                "at": e["at"],
                "role": ROLE_LABELS.get(role, role),
                "who": who,
                "op": data.get("op", ""),
                "previous": previous,
                "reason": data.get("reason", ""),
                "actor": e["actor"] or "automation",
            }
        )
    current = [
        {"role": ROLE_LABELS[role], "names": holders[role]}
        for role in IncidentRole
        if holders.get(role)
    ]
    commander = holders.get(IncidentRole.COMMANDER) or []
    return {"current": current, "commander": commander[0] if commander else "", "history": history}


def alarm_breaches(timeline: Sequence[Mapping[str, Any]], *, end: datetime) -> list[dict]:
    """Intervals the alarm fired, from the timeline's alarm events (firing ... clear).

    A firing with no clear after it lasts until ``end`` (the close, or now) and says so.
    """
    out: list[dict] = []
    started: Mapping[str, Any] | None = None
    for event in timeline:
        if event["kind"] != EventKind.ALARM:
            continue
        firing = bool((event.get("data") or {}).get("firing"))
        if firing and started is None:
            started = event
        elif not firing and started is not None:
            out.append(_breach(started, event["at"], cleared=True))
            started = None
    if started is not None:
        out.append(_breach(started, max(end, started["at"]), cleared=False))
    return out


def _breach(started: Mapping[str, Any], until: datetime, *, cleared: bool) -> dict:
    data = started.get("data") or {}
    return {
        "start": started["at"],
        "end": until,
        "cleared": cleared,
        "seconds": (until - started["at"]).total_seconds(),
        "measured": data.get("measured"),
        "threshold": data.get("threshold"),
    }


def detection(data: RecordInput, breaches: Sequence[Mapping[str, Any]]) -> dict:
    alarm = data.playbook["alarm"]
    measure = alarm["measure"]
    first = breaches[0] if breaches else None
    inv = data.investigation
    return {
        "title": alarm["title"] or "Alarm",
        "measure": (
            f"{measure['reduce']} of {measure['source']} {measure['signal']} "
            f"over {measure['window_s']} s"
        ),
        "signal": measure["signal"],
        "op": alarm["op"],
        "threshold": data.alarm_threshold,
        "threshold_expr": alarm["threshold_expr"],
        "first_firing_at": first["start"] if first else None,
        "first_measured": first["measured"] if first else None,
        "opened_by": opened_by(inv, data.timeline),
        "alert_fingerprint": inv.get("alert_fingerprint", ""),
        "alert_name": alert_name(inv, data.timeline),
        "how": detected_how(inv),
        "detected_at": inv["opened_at"],
        # From the alarm's first firing to the investigation's opening; negative: opened
        # before the alarm fired (someone noticed first).
        "delay_s": (inv["opened_at"] - first["start"]).total_seconds() if first else None,
    }


def alert_name(inv: Mapping[str, Any], timeline: Sequence[Mapping[str, Any]]) -> str:
    """The alert that opened it or was folded into it: the alertname of its alert events
    (the investigation's own fingerprint first)."""
    alerts = [e for e in timeline if e["kind"] == EventKind.ALERT]
    fingerprint = inv.get("alert_fingerprint", "")
    own = [e for e in alerts if (e.get("data") or {}).get("fingerprint") == fingerprint]
    for event in own or alerts:
        name = ((event.get("data") or {}).get("labels") or {}).get("alertname")
        if name:
            return str(name)
    return ""


def detected_how(inv: Mapping[str, Any]) -> str:
    if inv.get("opened_by"):
        return "a person opened it"
    if inv.get("alert_fingerprint"):
        return "an alert opened it"
    return "automation opened it"


def sample_impact(
    series: Sequence[Sequence[Point]], op: str, threshold: float | None
) -> dict[str, Any]:
    """How long the alarm's own measurement was over its threshold, from the stored
    samples (each holds until the next, at most twice the usual spacing, and the last one
    is an instant; any engine over the line counts once), and what that burned of the
    SLO's error budget."""
    compare = _OPS.get(op)
    intervals: list[tuple[float, float]] = []
    if compare is not None and threshold is not None:
        for raw in series:
            points = sorted(p for p in raw if p[1] == p[1])
            if len(points) < 2:
                continue
            gaps = sorted(b[0] - a[0] for a, b in pairwise(points))
            hold_max = 2 * gaps[len(gaps) // 2]
            for (t, v), nxt in zip(points, [*points[1:], None], strict=True):
                if compare(v, threshold):
                    until = min(nxt[0], t + hold_max) if nxt else t
                    intervals.append((t, max(until, t)))
    merged: list[list[float]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    seconds = sum(hi - lo for lo, hi in merged) if merged else None
    return {
        "sample_breach_s": seconds,
        "sample_first_at": datetime.fromtimestamp(merged[0][0], tz=UTC) if merged else None,
        "sample_last_at": datetime.fromtimestamp(merged[-1][1], tz=UTC) if merged else None,
        "slo": {
            "objective_pct": SLO_OBJECTIVE * 100,
            "window_days": SLO_WINDOW_S // 86_400,
            "budget_s": ERROR_BUDGET_S,
            "burned_pct": None if seconds is None else 100 * seconds / ERROR_BUDGET_S,
        },
    }


def resolution(data: RecordInput) -> dict[str, Any]:
    """How it was resolved, from the record: the fix, when its verification last turned
    passing before the close (the timeline's verification events), and the close."""
    inv = data.investigation
    closed = inv["closed_at"]
    passing = [
        e["at"]
        for e in data.timeline
        if e["kind"] == EventKind.VERIFICATION
        and (e.get("data") or {}).get("state") == "passing"
        and (closed is None or e["at"] <= closed)
    ]
    verified_at = max(passing) if passing else None
    if verified_at is None and closed and not inv.get("close_override") and data.fix:
        verified_at = closed  # closing without an override needs a passing verification
    fix = data.fix
    return {
        "fix_applied_at": fix["applied_at"] if fix else None,
        "fix_applied_by": (fix["applied_by"] or "automation") if fix else "",
        "verified_at": verified_at,
        "to_verified_fix_s": (verified_at - inv["opened_at"]).total_seconds()
        if verified_at
        else None,
        "closed_at": closed,
        "override": inv.get("close_override", ""),
    }


def impact(breaches: Sequence[Mapping[str, Any]], request_rate: Sequence[Sequence[Point]]) -> dict:
    """SLO breach duration from the alarm events; affected requests when the request rate
    was observed during the breach, otherwise explicitly unknown."""
    if not breaches:
        return {
            "breaches": [],
            "breach_s": None,
            "ongoing": False,
            "affected_requests": None,
            "affected_note": "unknown: no alarm events on the timeline",
        }
    affected = affected_requests(breaches, request_rate)
    return {
        "breaches": list(breaches),
        "breach_s": sum(b["seconds"] for b in breaches),
        "ongoing": not breaches[-1]["cleared"],
        "affected_requests": affected,
        "affected_note": (
            "estimated from the completed-request rate while the alarm fired"
            if affected is not None
            else "unknown: no request rate was observed while the alarm fired"
        ),
    }


def affected_requests(
    breaches: Sequence[Mapping[str, Any]], request_rate: Sequence[Sequence[Point]]
) -> int | None:
    """Requests completed while the alarm fired: each engine's rate integrated over each
    interval (a sample holds until the next one, at most twice the usual spacing)."""
    total, seen = 0.0, False
    for series in request_rate:
        points = sorted(p for p in series if p[1] == p[1])  # NaN is not a rate
        if len(points) < 2:
            continue
        gaps = sorted(b[0] - a[0] for a, b in pairwise(points))
        hold_max = 2 * gaps[len(gaps) // 2]
        for breach in breaches:
            lo, hi = breach["start"].timestamp(), breach["end"].timestamp()
            for (t, v), nxt in zip(points, [*points[1:], None], strict=True):
                until = min(nxt[0], t + hold_max) if nxt else t + hold_max
                overlap = min(until, hi) - max(t, lo)
                if overlap > 0:
                    total += max(v, 0.0) * overlap
                    seen = True
    return round(total) if seen else None


def hypothesis_tree(
    playbook: Mapping[str, Any], decisions: Sequence[Mapping[str, Any]]
) -> list[dict]:
    """Every node of the playbook (stored in tree order with its depth) with its final
    state and the decisions on it (each with the evidence frozen when it was made)."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for decision in sorted(decisions, key=lambda d: d["sequence"]):
        by_node.setdefault(decision["node"], []).append(decision)
    out: list[dict] = []
    for node in playbook["hypotheses"]:
        history = by_node.get(node["key"], [])
        out.append(
            {
                "key": node["key"],
                "title": node["title"],
                "rationale": node["rationale"],
                "depth": node["depth"],
                "is_cause": node["is_cause"],
                "state": STATE_AFTER[history[-1]["action"]] if history else NodeState.OPEN,
                "decisions": [_decision(d) for d in history],
            }
        )
    # Decisions on a node a later playbook version dropped are still part of the record.
    known = {n["key"] for n in out}
    for key, history in by_node.items():
        if key not in known:
            out.append(
                {
                    "key": key,
                    "title": key,
                    "rationale": "",
                    "depth": 0,
                    "is_cause": True,
                    "state": STATE_AFTER[history[-1]["action"]],
                    "decisions": [_decision(d) for d in history],
                }
            )
    return out


def _decision(d: Mapping[str, Any]) -> dict:
    evidence = d.get("evidence") or {}
    return {
        "sequence": d["sequence"],
        "action": d["action"],
        "reason": d["reason"],
        "automatic": d["automatic"],
        "decided_by": d["decided_by"] or ("automatic rule" if d["automatic"] else "automation"),
        "decided_at": d["decided_at"],
        "suggestion": evidence.get("suggestion", ""),
        "checks": [_check(c) for c in evidence.get("checks", []) if isinstance(c, Mapping)],
    }


def _check(c: Mapping[str, Any]) -> dict:
    return {
        "id": str(c.get("id", "")),
        "title": str(c.get("title", "")),
        "measured": _number(c.get("measured")),
        "confirm_threshold": _number(c.get("confirm_threshold")),
        "eliminate_threshold": _number(c.get("eliminate_threshold")),
        "outcome": str(c.get("outcome", "")),
        "reason": str(c.get("reason", "")),
        "window_s": c.get("window_s") or 0,
    }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def root_cause(
    inv, playbook: Mapping[str, Any], tree: Sequence[Mapping[str, Any]], fix
) -> dict | None:
    key = inv.get("root_cause") or (fix["node"] if fix else "")
    if not key:
        confirmed = [n for n in tree if n["state"] == NodeState.CONFIRMED and n["is_cause"]]
        key = confirmed[-1]["key"] if confirmed else ""
    if not key:
        return None
    node = next((n for n in tree if n["key"] == key), None)
    if node is None:
        return {"key": key, "title": key, "rationale": "", "confirmed_by": None}
    confirming = [d for d in node["decisions"] if d["action"] == DecisionAction.CONFIRM]
    return {
        "key": key,
        "title": node["title"],
        "rationale": node["rationale"],
        "confirmed_by": confirming[-1] if confirming else None,
    }


def fix_section(playbook: Mapping[str, Any], fix: Mapping[str, Any] | None) -> dict | None:
    if fix is None:
        return None
    node = next((n for n in playbook["hypotheses"] if n["key"] == fix["node"]), None)
    template = node["fix"] if node else None  # None: the playbook had no such cause
    parameters = dict(fix["parameters"])
    command = template["command"] if template else ""
    command = re.sub(
        r"\{(\w+)\}",
        lambda m: _shown(parameters[m[1]]) if m[1] in parameters else m[0],
        command,
    )
    return {
        "key": fix["key"],
        "title": template["title"] if template else fix["key"],
        "node": fix["node"],
        "parameters": {k: _shown(v) for k, v in parameters.items()},
        "command": command,
        "note": fix["note"],
        "applied_by": fix["applied_by"] or "automation",
        "applied_at": fix["applied_at"],
    }


def _shown(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def verification_section(data: RecordInput) -> dict | None:
    result = data.verification
    override = data.investigation.get("close_override", "")
    if result is None:
        return {"state": "none", "criteria": [], "override": override, "at": data.verified_at}
    return {
        "state": result["state"],
        "elapsed_s": result["elapsed_s"],
        "window_s": result["window_s"],
        "at": data.verified_at,
        "criteria": [
            {
                "title": c["title"],
                "measured": c["measured"],
                "op": c["op"],
                "threshold": c["threshold"],
                "holds": c["holds"],
                "guard": c["guard"],
                # Facts frozen before a bucket could leave a criterion undecided have none.
                "held": c.get("held", ""),
            }
            for c in result["criteria"]
        ],
        "side_effects": list(result["side_effects"]),
        "override": override,
    }


def gate_section(data: RecordInput) -> dict | None:
    """The promoted alert as frozen at close; its rule names the investigation by the
    address the document is read at."""
    gate = data.gate
    if not gate:
        return None
    alert, backtest, rule = gate["alert"], gate.get("backtest"), gate["rule"]
    annotations = {**rule["annotations"], "investigation": data.investigation_url}

    def when(ts: float | None) -> datetime | None:
        return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else None

    return {
        "name": alert["name"],
        "expr": alert["expr"],
        "for": alert["for"],
        "summary": alert["summary"],
        "rule_yaml": rules_yaml([{**rule, "annotations": annotations}]),
        "backtest": None
        if backtest is None
        else {
            "fired_at": when(backtest["fired_at"]),
            "alarm_at": when(backtest["alarm_at"]),
            "lead_s": backtest["lead_s"],
        },
    }


def narrative(version: Mapping[str, Any] | None) -> list[dict]:
    sections = (version or {}).get("sections") or {}
    return [
        {"key": key, "title": title, "text": str(sections.get(key, "") or "")}
        for key, title in SECTIONS.items()
    ]


VERSION_META = (
    "number",
    "edited_by",
    "created_at",
    "comment",
    "review_state",
    "review_requested_by",
    "review_requested_at",
    "reviewer",
    "published_at",
)


def _version_meta(version: Mapping[str, Any] | None) -> dict | None:
    if not version:
        return None
    return {k: version.get(k) for k in VERSION_META}


def chart_data(data: RecordInput, tree: Sequence[Mapping[str, Any]]) -> dict:
    """What the alarm chart draws: the measurement, its threshold, decisions and the fix."""
    start, end = data.window or (data.investigation["opened_at"], data.verified_at)
    markers = [
        {
            "t": d["decided_at"].timestamp(),
            "label": f"{d['action']} {node['key']}",
            "kind": "decision",
        }
        for node in tree
        for d in node["decisions"]
    ]
    markers.sort(key=lambda m: m["t"])
    fix = data.fix
    alarm = data.playbook["alarm"]
    signal = alarm["measure"]["signal"]
    return {
        "title": f"{alarm['title'] or 'Alarm'}: {signal}",
        "signal": signal,
        "series": [list(points) for points in data.alarm_series],
        "threshold": data.alarm_threshold,
        "op": alarm["op"],
        "start": start.timestamp(),
        "end": end.timestamp(),
        "markers": markers,
        "fix_at": fix["applied_at"].timestamp() if fix else None,
        "opened_at": data.investigation["opened_at"].timestamp(),
    }


def _event(e: Mapping[str, Any]) -> dict:
    return {
        "at": e["at"],
        "kind": e["kind"],
        "actor": e["actor"] or "automation",
        "summary": e["summary"],
    }


# --- the loader ---------------------------------------------------------------------------


def load_document(
    investigation,
    *,
    investigation_url: str = "",
    version_number: int | None = None,
    now: datetime | None = None,
) -> dict:
    """Read the record and build the document. A closed investigation is rendered from
    what it froze (the playbook as it opened, verification, gate and chart as it closed),
    so a later render says the same thing whatever changed since; an open one's draft from
    the same facts computed as of ``now``. ``version_number`` picks a narrative version
    (default: the newest)."""
    from django.urls import reverse
    from django.utils import timezone

    from investigations import frozen
    from investigations.playbook import get_playbook
    from postmortems.models import ActionItem, Postmortem, PostmortemVersion

    now = now or timezone.now()
    investigation_url = investigation_url or reverse(
        "investigations:detail", args=[investigation.pk]
    )
    playbook = investigation.playbook_facts or frozen.playbook_facts(
        get_playbook(investigation.symptom)
    )
    facts = investigation.closing_facts if investigation.closed_at else None
    if not facts:
        # Open (a draft as of now), or closed before records were frozen and never migrated.
        facts = frozen.closing_facts_of(investigation, investigation.closed_at or now)
    at = datetime.fromisoformat(facts["at"])
    start, end = (datetime.fromisoformat(t) for t in facts["window"])
    name = _username
    timeline = [
        {
            "at": e.at,
            "kind": e.kind,
            "actor": name(e.actor) or e.actor_name,  # rows before actor_name: ""
            "summary": e.summary,
            "data": e.data,
        }
        for e in investigation.timeline.select_related("actor").order_by("at", "pk")
    ]
    decisions = [
        {
            "sequence": d.sequence,
            "node": d.node,
            "action": d.action,
            "reason": d.reason,
            "evidence": d.evidence,
            "automatic": d.automatic,
            "decided_by": name(d.decided_by),
            "decided_at": d.decided_at,
        }
        for d in investigation.decisions.select_related("decided_by").order_by("sequence")
    ]
    fix = None
    record = investigation.fixes.select_related("applied_by").order_by("-applied_at").first()
    if record is not None:
        fix = {
            "node": record.node,
            "key": record.key,
            "parameters": record.parameters,
            "note": record.note,
            "applied_by": name(record.applied_by),
            "applied_at": record.applied_at,
        }
    postmortem = Postmortem.objects.filter(investigation=investigation).first()
    version = items = None
    if postmortem is not None:
        versions = PostmortemVersion.objects.filter(postmortem=postmortem).select_related(
            "edited_by", "review_requested_by"
        )
        if version_number is not None:
            versions = versions.filter(number=version_number)
        found = versions.order_by("-number").first()
        if found is not None:
            version = {
                "number": found.number,
                "sections": found.sections,
                "edited_by": name(found.edited_by),
                "created_at": found.created_at,
                "comment": found.comment,
                "review_state": found.review_state,
                "review_requested_by": name(found.review_requested_by),
                "review_requested_at": found.review_requested_at,
                "reviewer": found.reviewer_name,
                "published_at": found.published_at,
            }
        items = [
            {
                "id": str(i.pk),
                "title": i.title,
                "owner": i.owner_name or "unassigned",
                "due": i.due,
                "type": i.type,
                "priority": i.priority,
                "overdue": i.is_overdue(now.date()),
                "status": i.status,
                "created_by": name(i.created_by),
                "created_at": i.created_at,
                "closed_by": name(i.closed_by),
                "closed_at": i.closed_at,
            }
            for i in ActionItem.objects.filter(postmortem=postmortem).select_related(
                "owner", "created_by", "closed_by"
            )
        ]
    alarm_series, request_rate = _series(investigation, playbook, facts, start, at)
    deployment = investigation.deployment
    data = RecordInput(
        investigation={
            "id": investigation.pk,
            "title": str(investigation),
            "symptom": investigation.symptom,
            "status": investigation.status,
            "severity": investigation.severity,
            "incident_status": investigation.incident_status,
            "is_drill": investigation.is_drill,
            "opened_at": investigation.opened_at,
            "opened_by": name(investigation.opened_by),
            "opened_by_name": investigation.opened_by_name,
            "closed_at": investigation.closed_at,
            "root_cause": investigation.root_cause,
            "close_override": investigation.close_override,
            "alert_fingerprint": investigation.alert_fingerprint,
            "deployment": {
                "name": deployment.name,
                "engine": deployment.get_engine_display(),
                "model_name": deployment.model_name,
            },
        },
        playbook=playbook,
        alarm_threshold=facts["alarm_threshold"],
        timeline=timeline,
        decisions=decisions,
        fix=fix,
        verification=facts["verification"],
        verified_at=at,
        gate=facts["gate"],
        investigation_url=investigation_url,
        action_items=items or [],
        version=version,
        alarm_series=alarm_series,
        request_rate=request_rate,
        window=(start, end),
    )
    return build_document(data)


def _series(investigation, playbook, facts, start: datetime, at: datetime):
    """The chart's series as frozen; for a record migrated without them (null), read from
    the stored observations with the frozen alarm measure."""
    from investigations import frozen

    if facts.get("alarm_series") is not None and facts.get("request_rate") is not None:
        return frozen.series_of(facts["alarm_series"]), frozen.series_of(facts["request_rate"])
    from investigations.evaluation import select
    from investigations.observations import load_observations

    window_s = int((at - start).total_seconds()) + 1
    measure = replace(frozen.measure_of(playbook["alarm"]["measure"]), window_s=window_s)
    rate = replace(frozen.REQUEST_RATE, window_s=window_s)
    observations = load_observations(
        investigation.deployment_id, {measure.signal: window_s, rate.signal: window_s}, at
    )
    return (
        select(measure, observations, at.timestamp()),
        select(rate, observations, at.timestamp()),
    )


def _username(user) -> str:
    return user.get_username() if user is not None else ""
