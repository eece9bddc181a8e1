"""The spans of raw probe data investigations read (charts, backtests): from when each
opened until it closed, or now. Registered with ``probes.retention`` so pruning keeps them."""

from __future__ import annotations

from collections.abc import Iterator

from investigations.models import Investigation
from probes.retention import Window


def investigation_windows() -> Iterator[Window]:
    yield from Investigation.objects.values_list("deployment_id", "opened_at", "closed_at")
