"""The regression gate: promote the signal that confirmed the cause to an alert.

Two artefacts come out of a resolved investigation. The alerting rule (Prometheus
YAML, ``for:`` and annotations linking back to the investigation) is rendered from
the cause's fix template with the fix's parameters. The backtest replays the
confirming checks over the investigation's recorded observations: would the
promoted signal have fired, and how long before the alarm did?
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from deployments import budget as b
from investigations.evaluation import Observations, compare, reduce, threshold_of
from investigations.playbook import Hypothesis, Playbook
from probes.promql import render_promql

DURATION = re.compile(r"^([0-9]+)([smh])$")


def duration_s(text: str) -> int:
    match = DURATION.match(text)
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]


def alert_rule(
    node: Hypothesis,
    parameters: Mapping[str, float],
    *,
    investigation_url: str,
    investigation_id: str,
) -> dict:
    """One Prometheus alerting rule for the confirmed cause."""
    alert = node.fix.alert if node.fix else None
    if alert is None:
        raise ValueError(f"{node.key} has no alert to promote")
    used = set(re.findall(r"\$\{(\w+)\}", alert.expr))
    values = {k: (int(v) if float(v).is_integer() else v) for k, v in parameters.items()}
    expr = render_promql(alert.expr, **{k: values[k] for k in used}) if used else alert.expr
    return {
        "alert": alert.name,
        "expr": expr,
        "for": alert.for_,
        "labels": {"severity": "page", "atlas_cause": node.key},
        "annotations": {
            "summary": alert.summary,
            "investigation": investigation_url,
            "runbook": f"Atlas investigation {investigation_id}: {node.title}",
        },
    }


def rules_yaml(rules: list[dict], group: str = "atlas-regression-gates") -> str:
    return yaml.safe_dump({"groups": [{"name": group, "rules": rules}]}, sort_keys=False)


@dataclass(frozen=True)
class Backtest:
    fired_at: float | None  # first time the confirming checks held for the whole ``for``
    alarm_at: float | None  # first time the alarm condition held
    lead_s: float | None  # how long before the alarm the promoted signal fired
    # How long the confirming checks had held when the replay ended (0 if they were not
    # holding): a fix within the rule's ``for:`` ends the replay before it could fire.
    held_s: float = 0.0


def backtest(
    playbook: Playbook,
    node: Hypothesis,
    budget: b.Budget,
    observations: Observations,
    *,
    start: float,
    end: float,
    step: float = 15.0,
) -> Backtest:
    """Replay the node's confirm conditions and the alarm over ``[start, end]``."""
    hold = duration_s(node.fix.alert.for_) if node.fix and node.fix.alert else 0
    scope = {f"budget.{n}": float(getattr(budget, n)) for n in b.Budget.__dataclass_fields__}
    confirming = [c for c in node.checks if c.confirm is not None]
    fired_at = alarm_at = None
    holding_since = None
    last = t = start
    while t <= end and (fired_at is None or alarm_at is None):
        last = t
        confirmed = bool(confirming)
        for check in confirming:
            measured = reduce(check.measure, observations, t)
            threshold, _ = threshold_of(check.confirm, scope)
            if (
                measured is None
                or threshold is None
                or not compare(check.confirm.op, measured, threshold)
            ):
                confirmed = False
                break
        if confirmed:
            holding_since = t if holding_since is None else holding_since
            if fired_at is None and t - holding_since >= hold:
                fired_at = t
        else:
            holding_since = None
        if alarm_at is None:
            measured = reduce(playbook.alarm.measure, observations, t)
            threshold, _ = threshold_of(playbook.alarm.when, scope)
            if (
                measured is not None
                and threshold is not None
                and compare(playbook.alarm.when.op, measured, threshold)
            ):
                alarm_at = t
        t += step
    lead = alarm_at - fired_at if fired_at is not None and alarm_at is not None else None
    held = last - holding_since if holding_since is not None else 0.0
    return Backtest(fired_at, alarm_at, lead, held)
