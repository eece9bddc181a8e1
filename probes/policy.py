"""The fetch policy configured for this deployment (see settings: ATLAS_PROBE_*)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from probes.net import FetchPolicy

# What storing a cycle needs after the fetches, and the least any fetch is given.
STORE_MARGIN_S = 1.0
MIN_FETCH_S = 1.0


def cycle_time_left(cycle_at: datetime, interval_s: int, now: datetime) -> float | None:
    """Seconds this cycle's fetches may take so that the poll is stored before the next
    cycle starts: a poll that overruns holds its targets' claims, and the next cycle's task
    skips them. A cycle already over (a replay, a backfill; live tasks expire before that)
    races nothing on the grid and keeps the configured timeout: None."""
    ends = cycle_at + timedelta(seconds=interval_s)
    if now >= ends:
        return None
    return max(MIN_FETCH_S, (ends - now).total_seconds() - STORE_MARGIN_S)


def fetch_policy(*, budget_s: float | None = None) -> FetchPolicy:
    """The configured bounds; ``budget_s``, when given, lowers the overall deadline."""
    total = float(settings.ATLAS_PROBE_TIMEOUT)
    if budget_s is not None:
        total = min(total, max(MIN_FETCH_S, budget_s))
    return FetchPolicy(
        allowed_networks=settings.ATLAS_PROBE_ALLOWED_NETWORKS,
        connect_timeout=min(2.0, total),
        read_timeout=min(5.0, total),
        total_timeout=total,
        max_bytes=settings.ATLAS_PROBE_MAX_BYTES,
    )
