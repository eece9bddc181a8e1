"""What an investigation's record keeps, so that its postmortem is a record, not a re-run.

Two sets of facts are frozen as plain JSON on the investigation:

- ``playbook_facts`` when it opens: the playbook's key, version and content digest and
  everything the postmortem prints of it (alarm, node titles and rationale in tree
  order, fix titles and commands, the alert templates). Editing the playbook file later
  changes neither the version shown nor a title.
- ``closing_facts`` when it closes, computed by the close action itself: the latest fix's
  verification, the regression gate's alert rule and backtest, the alarm's threshold and
  the series the chart draws. Later changes to evaluation, verification or the backtest
  change nothing already closed.

The ``*_facts`` builders from plain objects are pure; ``closing_facts_of`` is the one
reader of the live state. JSON only: datetimes are ISO strings, timestamps floats, and a
NaN (which PostgreSQL's jsonb refuses) is stored as null.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from investigations.gate import Backtest, alert_rule
from investigations.playbook import Hypothesis, Measure, Playbook
from investigations.verification import VerificationResult

# How much of the alarm's measurement before the investigation opened the chart shows.
CHART_CONTEXT = timedelta(minutes=15)
# The signal that counts completed requests per second (used to estimate affected requests).
REQUEST_RATE = Measure("e2e_count_rate", "engine", "mean", 300)
Series = list[list[list[float | None]]]


def playbook_facts(playbook: Playbook) -> dict[str, Any]:
    """The playbook as the record needs it, in tree order with each node's depth."""
    alarm = playbook.alarm
    nodes: list[dict[str, Any]] = []

    def visit(node: Hypothesis, depth: int) -> None:
        nodes.append(
            {
                "key": node.key,
                "title": node.title,
                "rationale": node.rationale,
                "depth": depth,
                "is_cause": node.is_cause,
                "fix": _fix_facts(node),
            }
        )
        for child in node.children:
            visit(child, depth + 1)

    for node in playbook.hypotheses:
        visit(node, 0)
    return {
        "key": playbook.key,
        "version": playbook.version,
        "digest": playbook.digest,
        "title": playbook.title,
        "summary": playbook.summary,
        "alarm": {
            "title": alarm.title,
            "measure": _measure_facts(alarm.measure),
            "op": alarm.when.op,
            "threshold_expr": alarm.when.value.source,
        },
        "hypotheses": nodes,
    }


def _fix_facts(node: Hypothesis) -> dict[str, Any] | None:
    fix = node.fix
    if fix is None:
        return None
    alert = fix.alert
    return {
        "key": fix.key,
        "title": fix.title,
        "command": fix.command,
        "verify_window_s": fix.verify_window_s,
        "alert": None
        if alert is None
        else {"name": alert.name, "expr": alert.expr, "for": alert.for_, "summary": alert.summary},
    }


def _measure_facts(measure: Measure) -> dict[str, Any]:
    return {
        "signal": measure.signal,
        "source": measure.source,
        "reduce": measure.reduce,
        "window_s": measure.window_s,
        "labels": dict(measure.labels),
        "where": list(measure.where) if measure.where else None,
    }


def measure_of(facts: Mapping[str, Any]) -> Measure:
    """The stored alarm measure back as a ``Measure`` (to read its stored observations)."""
    where = facts.get("where")
    return Measure(
        facts["signal"],
        facts["source"],
        facts["reduce"],
        int(facts["window_s"]),
        dict(facts.get("labels") or {}),
        None,
        (str(where[0]), str(where[1]), float(where[2])) if where else None,
    )


def verification_facts(result: VerificationResult | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "state": result.state,
        "elapsed_s": _finite(result.elapsed_s),
        "window_s": result.window_s,
        "criteria": [
            {
                "title": c.title,
                "measured": _finite(c.measured),
                "op": c.op,
                "threshold": _finite(c.threshold),
                "holds": c.holds,
                "guard": c.guard,
                "held": c.held,
            }
            for c in result.criteria
        ],
        "side_effects": [c.title for c in result.side_effects],
    }


def gate_facts(
    node: Hypothesis,
    parameters: Mapping[str, float],
    result: Backtest | None,
    *,
    investigation_id: str,
) -> dict[str, Any] | None:
    """The promoted alert, its rule (the investigation's URL is filled in when rendered:
    it depends on where the document is read) and the backtest on this record."""
    if node.fix is None or node.fix.alert is None:
        return None
    alert = node.fix.alert
    return {
        "alert": {
            "name": alert.name,
            "expr": alert.expr,
            "for": alert.for_,
            "summary": alert.summary,
        },
        "rule": alert_rule(
            node, parameters, investigation_url="", investigation_id=investigation_id
        ),
        "backtest": None
        if result is None
        else {
            "fired_at": _finite(result.fired_at),
            "alarm_at": _finite(result.alarm_at),
            "lead_s": _finite(result.lead_s),
            "held_s": _finite(result.held_s),
        },
    }


def series_facts(series: Sequence[Sequence[tuple[float, float]]]) -> Series:
    return [[[float(t), _finite(v)] for t, v in points] for points in series]


def series_of(facts: Sequence[Sequence[Sequence[float | None]]]) -> list[list[tuple[float, float]]]:
    """Stored series back as points; a stored null is the NaN it was."""
    return [
        [(float(t), math.nan if v is None else float(v)) for t, v in points] for points in facts
    ]


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# --- the reader ---------------------------------------------------------------------------


def closing_facts_of(investigation, at: datetime) -> dict[str, Any]:
    """The live state of ``investigation`` as of ``at``, as the facts its record keeps:
    what the close action stores, and what a draft postmortem of an open one shows."""
    from deployments import budget as b
    from investigations import live
    from investigations.evaluation import select, threshold_of
    from investigations.observations import load_observations

    state = live.current_state(investigation, now=at)
    playbook = state.playbook
    threshold = state.result.alarm.threshold
    if threshold is None:  # evaluation had no data: the budget alone says it
        scope = b.Budget.of(investigation.deployment)
        values = {f"budget.{n}": float(getattr(scope, n)) for n in b.Budget.__dataclass_fields__}
        threshold = threshold_of(playbook.alarm.when, values)[0]
    gate = None
    if state.gate is not None and state.fix is not None:
        gate = gate_facts(
            playbook.node(state.fix.node),
            state.fix.parameters,
            state.gate.get("backtest"),
            investigation_id=str(investigation.pk),
        )
    start = investigation.opened_at - CHART_CONTEXT
    window_s = int((at - start).total_seconds()) + 1
    measure = replace(playbook.alarm.measure, window_s=window_s)
    rate = replace(REQUEST_RATE, window_s=window_s)
    observations = load_observations(
        investigation.deployment_id, {measure.signal: window_s, rate.signal: window_s}, at
    )
    return {
        "at": at.isoformat(),
        "source": "close",
        "verification": verification_facts(state.verification),
        "gate": gate,
        "alarm_threshold": _finite(threshold),
        "window": [start.isoformat(), at.isoformat()],
        "alarm_series": series_facts(select(measure, observations, at.timestamp())),
        "request_rate": series_facts(select(rate, observations, at.timestamp())),
    }


# --- records closed before they were frozen (migration 0011) -----------------------------


def migrated_closing_facts(
    *,
    opened_at: datetime,
    closed_at: datetime,
    playbook: Mapping[str, Any],
    fix: Mapping[str, Any] | None,
    verification_state: str,
    alarm_threshold: float | None,
    rule: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What can be frozen of an investigation closed before records were: the verdict the
    close recorded (its audit entry; no criteria, which were never stored), the time since
    the fix, the gate's alert rule without its backtest (never stored: re-running it would
    be today's code judging yesterday's incident), the threshold the alarm events carried.
    The chart's series are left null: the loader reads them from the stored observations."""
    node = next(
        (n for n in playbook.get("hypotheses", []) if fix and n["key"] == fix["node"]), None
    )
    template = node["fix"] if node else None
    verification = None
    if fix is not None:
        verification = {
            "state": verification_state or "unknown",
            "elapsed_s": max(0.0, (closed_at - fix["applied_at"]).total_seconds()),
            "window_s": template["verify_window_s"] if template else 0,
            "criteria": [],
            "side_effects": [],
        }
    gate = None
    if template and template.get("alert") and rule is not None:
        gate = {"alert": dict(template["alert"]), "rule": dict(rule), "backtest": None}
    start = opened_at - CHART_CONTEXT
    return {
        "at": closed_at.isoformat(),
        "source": "migration",
        "verification": verification,
        "gate": gate,
        "alarm_threshold": _finite(alarm_threshold),
        "window": [start.isoformat(), closed_at.isoformat()],
        "alarm_series": None,
        "request_rate": None,
    }
