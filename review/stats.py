"""Team statistics over past investigations: pure functions over plain rows, so each
definition is tested on hand-built numbers (the page states the same definitions).

Drills are excluded here as well as in the query: a drill's timings measure a rehearsal,
not an incident.

Definitions
- count by root cause: closed, real investigations grouped by ``root_cause`` (the cause
  whose fix was applied last before closing; empty when closed without a fix).
- time to root cause: from ``opened_at`` to the first *confirm* decision on the node that
  became the root cause; closed, real investigations with a root cause and such a decision.
- time to verified fix (MTTR): from ``opened_at`` to the last moment the fix's verification
  turned passing before the close (the poll cycle's "verification passing" timeline event),
  for closed, real investigations closed on a passing verification (no override). Records
  without that event (made before Atlas wrote it) use ``closed_at`` instead, an upper bound:
  closing without an override is only allowed once verification passes.
- median: the middle value (mean of the two middle values for an even count);
  p90: nearest rank, the smallest value with at least 90 % of values at or below it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class InvestigationRow:
    id: object
    opened_at: datetime
    closed_at: datetime | None
    root_cause: str
    is_drill: bool
    overridden: bool  # closed without a passing verification


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
) -> TeamStatistics:
    """Statistics by the definitions above. ``confirms`` may hold any confirm decisions of
    these investigations; the ones on other nodes are ignored. ``verified`` holds the moments
    verifications turned passing; the last one at or before the close counts."""
    passing: dict[object, list[datetime]] = {}
    for row in verified:
        passing.setdefault(row.investigation_id, []).append(row.at)
    first_confirm: dict[tuple[object, str], datetime] = {}
    for row in confirms:
        key = (row.investigation_id, row.node)
        if key not in first_confirm or row.decided_at < first_confirm[key]:
            first_confirm[key] = row.decided_at
    drills = still_open = overridden = without_confirm = at_close = 0
    causes: Counter[str] = Counter()
    to_root: list[float] = []
    to_fix: list[float] = []
    for inv in investigations:
        if inv.is_drill:
            drills += 1
            continue
        if inv.closed_at is None:
            still_open += 1
            continue
        causes[inv.root_cause] += 1
        if inv.root_cause:
            confirmed = first_confirm.get((inv.id, inv.root_cause))
            if confirmed is None:
                without_confirm += 1
            else:
                to_root.append(max((confirmed - inv.opened_at).total_seconds(), 0.0))
        if inv.overridden:
            overridden += 1
        else:
            before_close = [at for at in passing.get(inv.id, ()) if at <= inv.closed_at]
            verified_at = max(before_close) if before_close else inv.closed_at
            at_close += not before_close
            to_fix.append(max((verified_at - inv.opened_at).total_seconds(), 0.0))
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
    )


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
