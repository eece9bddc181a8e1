"""Team statistics over past investigations: pure functions over plain rows, so each
definition is tested on hand-built numbers (the page states the same definitions).

Drills are excluded here as well as in the query: a drill's timings measure a rehearsal,
not an incident.

Definitions
- time to acknowledge: from the alarm's onset to the first responder action. The onset is
  the earliest of the first alarm or alert *firing* event on the timeline and the opening
  (a person who opened it before any alarm noticed first); a responder action is any
  timeline event a person wrote (opening it, a decision, a fix, a severity, a status, a
  role, a status update). Closed, real investigations with such an action; those with
  none (opened and run by automation only) are counted as never acknowledged.
- count by severity: closed, real investigations grouped by their severity as closed
  ("not set" when nobody set one).
- count by root cause: closed, real investigations grouped by ``root_cause`` (the cause
  whose fix was applied last before closing; empty when closed without a fix).
- time to root cause: from ``opened_at`` to the first *confirm* decision on the node that
  became the root cause; closed, real investigations with a root cause and such a decision.
- time to verified fix (MTTR; DORA's recovery time, service restored): from ``opened_at``
  to the last moment the fix's verification turned passing before the close (the poll
  cycle's "verification passing" timeline event), for closed, real investigations closed
  on a passing verification (no override). Records
  without that event (made before Atlas wrote it) use ``closed_at`` instead, an upper bound:
  closing without an override is only allowed once verification passes.
- weekly trends: the same definitions over the investigations *opened* in each week
  (Monday 00:00 UTC to the next Monday), counts per week and the week's medians.
- median: the middle value (mean of the two middle values for an even count);
  p90: nearest rank, the smallest value with at least 90 % of values at or below it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta


@dataclass(frozen=True)
class InvestigationRow:
    id: object
    opened_at: datetime
    closed_at: datetime | None
    root_cause: str
    is_drill: bool
    overridden: bool  # closed without a passing verification
    severity: str = ""


@dataclass(frozen=True)
class OnsetRow:
    investigation_id: object
    at: datetime  # the first alarm or alert firing event


@dataclass(frozen=True)
class ActionRow:
    investigation_id: object
    at: datetime  # the first timeline event a person wrote


@dataclass(frozen=True)
class ConfirmRow:
    investigation_id: object
    node: str
    decided_at: datetime


@dataclass(frozen=True)
class VerifiedRow:
    investigation_id: object
    at: datetime  # a verification turned passing


@dataclass(frozen=True)
class DurationSummary:
    count: int
    median_s: float | None
    p90_s: float | None


@dataclass(frozen=True)
class TeamStatistics:
    closed: int
    still_open: int
    drills_excluded: int
    by_root_cause: list[tuple[str, int]] = field(default_factory=list)
    time_to_root_cause: DurationSummary = DurationSummary(0, None, None)
    without_confirm: int = 0  # had a root cause but no confirm decision on it
    time_to_verified_fix: DurationSummary = DurationSummary(0, None, None)
    closed_with_override: int = 0
    verified_at_close: int = 0  # no "verification passing" event: the close time was used
    time_to_acknowledge: DurationSummary = DurationSummary(0, None, None)
    never_acknowledged: int = 0
    by_severity: list[tuple[str, int]] = field(default_factory=list)
    weeks: list[Week] = field(default_factory=list)


@dataclass(frozen=True)
class Week:
    start: date  # the Monday (UTC)
    count: int
    by_severity: dict[str, int]
    by_root_cause: dict[str, int]
    median_acknowledge_s: float | None
    median_root_cause_s: float | None
    median_verified_fix_s: float | None


SEVERITY_ORDER = ("sev1", "sev2", "sev3", "sev4", "")
MAX_WEEKS = 26


def week_of(at: datetime) -> date:
    day = at.date()
    return day - timedelta(days=day.weekday())


def median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2


def nearest_rank(values: Sequence[float], percent: float) -> float | None:
    if not values:
        return None
    if not 0 < percent <= 100:
        raise ValueError("percent must be in (0, 100]")
    ordered = sorted(values)
    rank = math.ceil(percent / 100 * len(ordered))
    return float(ordered[max(rank, 1) - 1])


def summarize(durations_s: Sequence[float]) -> DurationSummary:
    return DurationSummary(len(durations_s), median(durations_s), nearest_rank(durations_s, 90))


def team_statistics(
    investigations: Iterable[InvestigationRow],
    confirms: Iterable[ConfirmRow],
    verified: Iterable[VerifiedRow] = (),
    onsets: Iterable[OnsetRow] = (),
    first_actions: Iterable[ActionRow] = (),
) -> TeamStatistics:
    """Statistics by the definitions above. ``confirms`` may hold any confirm decisions of
    these investigations; the ones on other nodes are ignored. ``verified`` holds the moments
    verifications turned passing; the last one at or before the close counts. ``onsets``
    and ``first_actions`` may hold any such events; the earliest of each counts."""
    passing: dict[object, list[datetime]] = {}
    for row in verified:
        passing.setdefault(row.investigation_id, []).append(row.at)
    first_confirm: dict[tuple[object, str], datetime] = {}
    for row in confirms:
        key = (row.investigation_id, row.node)
        if key not in first_confirm or row.decided_at < first_confirm[key]:
            first_confirm[key] = row.decided_at
    onset = _earliest(onsets)
    acted = _earliest(first_actions)
    drills = still_open = overridden = without_confirm = at_close = unacknowledged = 0
    causes: Counter[str] = Counter()
    severities: Counter[str] = Counter()
    to_ack: list[float] = []
    to_root: list[float] = []
    to_fix: list[float] = []
    weekly: dict[date, dict[str, list]] = {}
    for inv in investigations:
        if inv.is_drill:
            drills += 1
            continue
        if inv.closed_at is None:
            still_open += 1
            continue
        week = weekly.setdefault(
            week_of(inv.opened_at),
            {"severity": [], "cause": [], "ack": [], "root": [], "fix": []},
        )
        causes[inv.root_cause] += 1
        severities[inv.severity] += 1
        week["severity"].append(inv.severity)
        week["cause"].append(inv.root_cause)
        start = min(onset.get(inv.id, inv.opened_at), inv.opened_at)
        first = acted.get(inv.id)
        if first is None:
            unacknowledged += 1
        else:
            to_ack.append(max((first - start).total_seconds(), 0.0))
            week["ack"].append(to_ack[-1])
        if inv.root_cause:
            confirmed = first_confirm.get((inv.id, inv.root_cause))
            if confirmed is None:
                without_confirm += 1
            else:
                to_root.append(max((confirmed - inv.opened_at).total_seconds(), 0.0))
                week["root"].append(to_root[-1])
        if inv.overridden:
            overridden += 1
        else:
            before_close = [at for at in passing.get(inv.id, ()) if at <= inv.closed_at]
            verified_at = max(before_close) if before_close else inv.closed_at
            at_close += not before_close
            to_fix.append(max((verified_at - inv.opened_at).total_seconds(), 0.0))
            week["fix"].append(to_fix[-1])
    return TeamStatistics(
        closed=sum(causes.values()),
        still_open=still_open,
        drills_excluded=drills,
        by_root_cause=sorted(causes.items(), key=lambda kv: (-kv[1], kv[0] == "", kv[0])),
        time_to_root_cause=summarize(to_root),
        without_confirm=without_confirm,
        time_to_verified_fix=summarize(to_fix),
        closed_with_override=overridden,
        verified_at_close=at_close,
        time_to_acknowledge=summarize(to_ack),
        never_acknowledged=unacknowledged,
        by_severity=sorted(severities.items(), key=lambda kv: _severity_rank(kv[0])),
        weeks=_weeks(weekly),
    )


def _earliest(rows: Iterable[OnsetRow | ActionRow]) -> dict[object, datetime]:
    out: dict[object, datetime] = {}
    for row in rows:
        if row.investigation_id not in out or row.at < out[row.investigation_id]:
            out[row.investigation_id] = row.at
    return out


def _severity_rank(severity: str) -> int:
    return SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else len(SEVERITY_ORDER)


def _weeks(weekly: dict[date, dict[str, list]]) -> list[Week]:
    """Every week from the first to the last with a closed investigation (at most the last
    ``MAX_WEEKS``), empty weeks included so a trend line has no false joins."""
    if not weekly:
        return []
    last = max(weekly)
    first = max(min(weekly), last - timedelta(weeks=MAX_WEEKS - 1))
    out = []
    start = first
    while start <= last:
        rows = weekly.get(start, {"severity": [], "cause": [], "ack": [], "root": [], "fix": []})
        out.append(
            Week(
                start=start,
                count=len(rows["severity"]),
                by_severity=dict(Counter(rows["severity"])),
                by_root_cause=dict(Counter(rows["cause"])),
                median_acknowledge_s=median(rows["ack"]),
                median_root_cause_s=median(rows["root"]),
                median_verified_fix_s=median(rows["fix"]),
            )
        )
        start += timedelta(weeks=1)
    return out


def format_duration(seconds: float | None) -> str:
    """'2 d 3 h', '1 h 05 min', '4 min 10 s', '12 s' (or an em dash for no data)."""
    if seconds is None:
        return "—"
    total = round(seconds)
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"
