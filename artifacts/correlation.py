"""The deployment's own latency record, for correlating a gc log's pauses with ITL spikes.

The analysis of the file stays pure; this supplies what only the deployment knows: the p99
ITL the probes stored per poll cycle around the log's time span.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from probes.models import Observation, TargetKind

MARGIN = timedelta(seconds=120)
MAX_POINTS = 20_000


def latency_source(deployment_id) -> Callable[[float, float], list[tuple[float, float]]]:
    def points(start: float, end: float) -> list[tuple[float, float]]:
        rows = (
            Observation.objects.filter(
                target__deployment_id=deployment_id,
                target__kind=TargetKind.ENGINE,
                signal="itl_p99",
                labels="",
                taken_at__gte=datetime.fromtimestamp(start, tz=UTC) - MARGIN,
                taken_at__lte=datetime.fromtimestamp(end, tz=UTC) + MARGIN,
            )
            .order_by("taken_at")
            .values_list("taken_at", "value")[:MAX_POINTS]
        )
        return [(taken_at.timestamp(), value) for taken_at, value in rows]

    return points
