"""When to try a failed delivery again: pure, so the schedule is tested without a clock."""

from __future__ import annotations

from collections.abc import Sequence


def retry_after(attempts: int, transient: bool, schedule: Sequence[float]) -> float | None:
    """Seconds until the next attempt after ``attempts`` tries have failed, or None when the
    delivery has failed for good: a permanent error (404, a refused address, a bad URL)
    fails the same way every time, and a transient one stops once the schedule is spent."""
    if not transient or attempts < 1 or attempts > len(schedule):
        return None
    return float(schedule[attempts - 1])
