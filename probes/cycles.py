"""Poll cycles: which instant a poll belongs to, so that every worker agrees on the key.

A cycle is the poll interval's grid on UTC epoch seconds. Two dispatches in the
same cycle (beat restarted, a duplicate message) produce the same key and the
second writes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime


def cycle_start(now: datetime, interval_s: int) -> datetime:
    if interval_s < 1:
        raise ValueError("interval must be at least one second")
    epoch = int(now.timestamp())
    return datetime.fromtimestamp(epoch - epoch % interval_s, tz=UTC)
