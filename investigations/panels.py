"""What the investigation page shows beside the tree: the deployment's budget observed
against its arithmetic, and the evidence cards (one chart per check, and the alarm's).

``budget_rows`` is pure. ``evidence_cards`` reads the record (one observation read for
every chart, the alarm onset, decisions and fixes) and hands the drawing to
investigations.charts; the view caches its result per poll cycle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import OuterRef, Subquery

from deployments import budget as b
from investigations import charts
from investigations.choices import EventKind
from investigations.evaluation import FROM_ENGINE, Evaluation, capacity_source, reduce
from investigations.models import Decision, FixRecord, Investigation, TimelineEvent
from investigations.playbook import Measure, Playbook
from probes import kinds
from probes.models import Poll

# How much of the record before the investigation opened the charts show (the postmortem's
# alarm chart shows the same), so the onset is on the chart rather than at its edge.
LEAD = timedelta(minutes=15)

# Signals the budget panel reads beyond what evaluation loads (name -> window seconds).
BUDGET_SIGNALS = {
    "prefill_time_mean": 300,
    "itl_p99": 300,
    "requests_waiting": 300,
}
# Out-of-range rules, the playbook's own where it has one: KV usage more than 0.15 over
# what the running requests hold is unexplained (kv-block-leak stops eliminating there),
# 0.9 is full (kv-cache-pressure confirms there), prefill within 25 % of the arithmetic is
# normal (prefill-slow), a step over the mixed-step ceiling carried more than one chunk.
KV_UNEXPLAINED = 0.15
KV_FULL = 0.9
PREFILL_TOLERANCE = 1.25
CAPACITY_TOLERANCE = 0.10


@dataclass(frozen=True)
class BudgetRow:
    title: str
    observed: float | None
    expected: float | None
    observed_text: str
    expected_text: str
    flagged: bool
    note: str


def _engine(signal: str, reducer: str, observations: Mapping, now: float) -> float | None:
    return reduce(Measure(signal, "engine", reducer, 300), observations, now)


def _text(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def budget_rows(
    budget: b.Budget, observations: Mapping, now: float, expected: Mapping[str, float | None]
) -> list[BudgetRow]:
    """Observed beside expected for the numbers the budget arithmetic predicts."""
    rows = []
    capacity = b.kv_capacity_tokens(budget)
    used = capacity_source(expected)
    reported = expected.get("expected.kv_capacity_tokens") if used == FROM_ENGINE else None
    block = expected.get("expected.kv_block_size")
    rows.append(
        BudgetRow(
            "KV capacity per rank",
            reported,
            float(capacity),
            "—" if reported is None else f"{reported:,.0f} tokens",
            f"{capacity:,} tokens",
            reported is not None and abs(reported - capacity) > CAPACITY_TOLERANCE * capacity,
            f"evaluation uses the capacity {used}"
            + (f" ({block:g}-token blocks)" if block else "")
            + "; expected: KV budget per rank / KV bytes per token; observed where the "
            "engine reports its KV capacity (vLLM cache_config_info, SGLang token capacity)",
        )
    )
    usage = _engine("kv_cache_usage", "last", observations, now)
    held = expected.get("expected.kv_usage_of_running")
    flag = usage is not None and (
        usage >= KV_FULL or (held is not None and usage > held + KV_UNEXPLAINED)
    )
    rows.append(
        BudgetRow(
            "KV occupancy",
            usage,
            held,
            _text(None if usage is None else usage * 100, ".1f")
            + (" %" if usage is not None else ""),
            _text(None if held is None else held * 100, ".1f") + (" %" if held is not None else ""),
            flag,
            "expected: the running batch x (average prompt + half the average output, in "
            f"whole KV blocks) / capacity; flagged at {KV_FULL:.0%} or {KV_UNEXPLAINED:.0%} "
            "over what it holds",
        )
    )
    prompt = expected.get("expected.avg_prompt_tokens")
    prefill_s = expected.get("expected.prefill_s")
    mean_prefill = _engine("prefill_time_mean", "mean", observations, now)
    observed_ms = mean_prefill * 1000 / prompt if mean_prefill is not None and prompt else None
    expected_ms = prefill_s * 1000 / prompt if prefill_s and prompt else None
    rows.append(
        BudgetRow(
            "Prefill cost per prompt token",
            observed_ms,
            expected_ms,
            _text(observed_ms, ".4f") + (" ms" if observed_ms is not None else ""),
            _text(expected_ms, ".4f") + (" ms" if expected_ms is not None else ""),
            observed_ms is not None
            and expected_ms is not None
            and observed_ms > PREFILL_TOLERANCE * expected_ms,
            f"expected: chunk steps x (decode step + chunk cost) over the average prompt "
            f"({budget.prefill_ms_per_token:g} ms of compute per token); flagged over "
            f"{PREFILL_TOLERANCE:g}x",
        )
    )
    itl = reduce(Measure("itl_p99", "engine", "max", 300), observations, now)
    itl_ms = itl * 1000 if itl is not None else None
    ceiling = b.mixed_step_ceiling_ms(budget)
    rows.append(
        BudgetRow(
            "ITL p99 vs the mixed-step ceiling",
            itl_ms,
            ceiling,
            _text(itl_ms, ",.1f") + (" ms" if itl_ms is not None else ""),
            f"{ceiling:,.1f} ms",
            itl_ms is not None and itl_ms > ceiling,
            "decode step + one chunk of prefill: a slower step carried more work, or waited",
        )
    )
    waiting = _engine("requests_waiting", "mean", observations, now)
    rows.append(
        BudgetRow(
            "Queue depth",
            waiting,
            float(budget.queue_baseline_high),
            _text(waiting, ".1f"),
            f"{budget.queue_baseline_low} to {budget.queue_baseline_high} waiting",
            waiting is not None and waiting > budget.queue_baseline_high,
            "mean requests waiting over 5 minutes against the deployment's normal range",
        )
    )
    return rows


def record_version(investigation: Investigation) -> str:
    """Changes whenever the evidence cards would: a poll cycle, a decision, a fix, a close.
    One query."""
    latest_decision = Decision.objects.filter(investigation=OuterRef("pk")).order_by("-sequence")
    latest_fix = FixRecord.objects.filter(investigation=OuterRef("pk")).order_by("-applied_at")
    row = (
        Investigation.objects.filter(pk=investigation.pk)
        .values_list(
            "last_evaluated_at",
            "status",
            Subquery(latest_decision.values("sequence")[:1]),
            Subquery(latest_fix.values("pk")[:1]),
        )
        .first()
    )
    evaluated, status, sequence, fix = row or (None, "", None, None)
    stamp = evaluated.timestamp() if evaluated else 0
    return f"{stamp:.0f}-{status}-{sequence or 0}-{str(fix or '')[:8]}"


def record_marks(investigation: Investigation) -> list[charts.Mark]:
    """The alarm's first onset, every decision and every fix, as chart marks."""
    marks = []
    onset = (
        TimelineEvent.objects.filter(
            investigation=investigation, kind=EventKind.ALARM, data__firing=True
        )
        .order_by("at", "pk")
        .values_list("at", flat=True)
        .first()
    )
    if onset is not None:
        marks.append(charts.Mark(onset.timestamp(), "alarm firing", "alarm"))
    for node, action, at in investigation.decisions.order_by("sequence").values_list(
        "node", "action", "decided_at"
    ):
        marks.append(charts.Mark(at.timestamp(), f"{action} {node}", "decision", node))
    for key, at in investigation.fixes.order_by("applied_at").values_list("key", "applied_at"):
        marks.append(charts.Mark(at.timestamp(), f"fix {key}", "fix"))
    return marks


def chart_window(investigation: Investigation, now: datetime) -> tuple[datetime, datetime]:
    """From ``LEAD`` before the investigation opened to now (or its close)."""
    return investigation.opened_at - LEAD, min(now, investigation.closed_at or now)


def chart_signals(investigation: Investigation, playbook: Playbook, now: datetime) -> dict:
    """Signal -> how far back the charts read it: the whole window, plus a measure's own
    window before it (a rolling sum or increase at the window's start needs its lead-in).
    Passed to live.current_state, so evaluation and charts share one observation read."""
    start, _ = chart_window(investigation, now)
    span = int((now - start).total_seconds()) + 1  # the read ends at now, even once closed
    measures = [playbook.alarm.measure] + [c.measure for n in playbook.walk() for c in n.checks]
    signals: dict[str, int] = {}
    for m in measures:
        signals[m.signal] = max(signals.get(m.signal, 0), span + m.window_s)
    return signals


def _json(value: object) -> str:
    """Compact JSON for a chart; NaN and infinity refused (plotly's JSON has neither)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def evidence_cards(
    investigation: Investigation,
    playbook: Playbook,
    result: Evaluation,
    observations: Mapping,
    now: datetime,
) -> list[dict]:
    """The alarm's card, then one card per hypothesis with a chart per check.
    ``observations`` must cover ``chart_signals``."""
    start, end = chart_window(investigation, now)
    marks = record_marks(investigation)
    t0, t1 = start.timestamp(), end.timestamp()

    # Charts of one measure draw the same lines (50 hypotheses read ~35 signals): each is
    # computed and serialised once, and only thresholds and marks are per chart.
    lines: dict[tuple, tuple[charts.Traces, str]] = {}

    def chart(measure: Measure, thresholds, node: str) -> dict:
        key = (measure.source, measure.signal, measure.reduce, measure.window_s,
               tuple(sorted(measure.labels.items())))  # fmt: skip
        if key not in lines:
            drawn = charts.traces(measure, charts.matching(measure, observations), start=t0, end=t1)
            lines[key] = drawn, _json(drawn.data)
        traces, data_json = lines[key]
        figure = charts.figure(
            measure, (), start=t0, end=t1, thresholds=thresholds, marks=marks, node=node,
            drawn=traces,
        )  # fmt: skip
        figure["figure_json"] = (
            f'{{"data":{data_json},"layout":{_json(figure["figure"]["layout"])}}}'
        )
        return figure

    alarm = playbook.alarm
    cards = [
        {
            "key": "alarm",
            "title": alarm.title or "Alarm",
            "state": "firing"
            if result.alarm.firing
            else ("clear" if result.alarm.firing is False else "no data"),
            "suggestion": "",
            "charts": [
                {
                    "id": "alarm",
                    "title": alarm.title or alarm.measure.signal,
                    "measured": result.alarm.measured,
                    "outcome": "",
                    **chart(
                        alarm.measure,
                        [charts.Threshold("alarm", alarm.when.op, result.alarm.threshold)],
                        "",
                    ),
                }
            ],
        }
    ]
    for hypothesis in playbook.walk():
        node = result.find(hypothesis.key)
        rendered = []
        for check, outcome in zip(hypothesis.checks, node.checks, strict=True):
            thresholds = []
            if check.confirm is not None:
                thresholds.append(
                    charts.Threshold("confirm", check.confirm.op, outcome.confirm_threshold)
                )
            if check.eliminate is not None:
                thresholds.append(
                    charts.Threshold("eliminate", check.eliminate.op, outcome.eliminate_threshold)
                )
            rendered.append(
                {
                    "id": check.id,
                    "title": check.title,
                    "measured": outcome.measured,
                    "outcome": outcome.outcome,
                    **chart(check.measure, thresholds, hypothesis.key),
                }
            )
        cards.append(
            {
                "key": hypothesis.key,
                "title": hypothesis.title,
                "state": node.state,
                "suggestion": node.suggestion,
                "charts": rendered,
            }
        )
    return cards


# How many unrecognised log lines the page shows, and from how far back: the longest
# window a log count is read over (gpu-oom's alarm, 48 h).
UNRECOGNISED_SHOWN = 5
UNRECOGNISED_LOOKBACK = timedelta(hours=48)


def unrecognised_log_lines(investigation: Investigation, now: datetime) -> list[dict]:
    """Log lines that looked like errors and matched no known event, newest first.

    They are why a zero count of OOMs or late captures stays inconclusive, so the page
    shows them: someone can read what the parser could not. One indexed read of the log
    targets' recent polls (the probe keeps the first few lines of each poll).
    """
    since = min(investigation.opened_at - LEAD, now - UNRECOGNISED_LOOKBACK)
    rows = (
        Poll.objects.filter(
            target__deployment_id=investigation.deployment_id,
            target__kind__in=kinds.values(source="log"),
            ok=True,
            cycle_at__gte=since,
            cycle_at__lte=now,
            snapshot__has_key="unrecognised",
        )
        .order_by("-cycle_at")
        .values_list("cycle_at", "target__url", "snapshot__unrecognised")[:UNRECOGNISED_SHOWN]
    )
    out: list[dict] = []
    for at, url, lines in rows:
        for line in lines if isinstance(lines, list) else ():
            if len(out) < UNRECOGNISED_SHOWN:
                out.append({"at": at, "target": url, "text": str(line)[:300]})
    return out
