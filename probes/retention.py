"""How long raw probe data is kept.

Polls and observations inside an investigation's window (from a margin before
it opened until a margin after it closed, or now) are kept as long as the
investigation exists: its charts and backtests read them. Everything else is
raw data nobody will look at again and is deleted after the retention period.
Evidence that a decision cited is frozen separately, so pruning never changes it.

Probes do not know what an investigation is: the layer that does registers a source of
windows with ``keep_windows`` (investigations does, in its app config).

Observations the console wrote itself on a stored kind's target (an analysed artifact's
signals, ``probes.kinds.Fetch.STORED``) are not raw poll data and are never pruned here:
they are kept as long as the artifact row they summarise, which any later evaluation
within a check's window of its ``captured_at`` reads, whether or not an investigation
was open then. They are a handful of rows per file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from probes.models import STORED_KINDS, Observation, Poll

MARGIN = timedelta(hours=1)

# (deployment id, start, end or None while it lasts) for each span whose raw data is read.
Window = tuple[object, datetime, datetime | None]
WindowSource = Callable[[], Iterable[Window]]
_SOURCES: dict[str, WindowSource] = {}


def keep_windows(name: str, source: WindowSource) -> None:
    """Register (or replace) a source of windows whose raw data must be kept."""
    _SOURCES[name] = source


def _windows() -> Iterable[Window]:
    for source in _SOURCES.values():
        yield from source()


def _window_filter(time_field: str) -> Q:
    keep = Q(pk__in=[])
    now = timezone.now()
    for deployment_id, opened, closed in _windows():
        keep |= Q(target__deployment_id=deployment_id) & Q(
            **{
                f"{time_field}__gte": opened - MARGIN,
                f"{time_field}__lte": (closed or now) + MARGIN,
            }
        )
    return keep


def prune(older_than: timedelta, *, now: datetime | None = None, batch: int = 10_000) -> int:
    """Delete raw rows older than ``older_than`` outside investigation windows; returns rows."""
    cutoff = (now or timezone.now()) - older_than
    deleted = 0
    for model, time_field in ((Observation, "taken_at"), (Poll, "cycle_at")):
        stale = (
            model.objects.filter(**{f"{time_field}__lt": cutoff})
            .exclude(target__kind__in=STORED_KINDS)
            .exclude(_window_filter(time_field))
        )
        while True:
            ids = list(stale.values_list("pk", flat=True)[:batch])
            if not ids:
                break
            deleted += model.objects.filter(pk__in=ids).delete()[0]
    return deleted
