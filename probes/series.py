"""Reading stored observations back as chart-ready series.

Charts get at most ``max_points`` per series, whatever the investigation's
length: each time bucket keeps its first, minimum, maximum and last points
(an M4-style reduction), so a single 300 ms ITL spike survives downsampling
where an average would hide exactly the evidence a commander is looking for.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from datetime import datetime
from operator import itemgetter

from probes.models import Observation

Point = tuple[float, float]  # (unix seconds, value)
_VALUE = itemgetter(1)


def downsample(points: Sequence[Point], max_points: int) -> list[Point]:
    """Keep at most ``max_points`` points (a multiple of 4 is used), extremes included.

    Points must be in time order. Each bucket's edges are found by bisection and its
    extremes by C-level ``min``/``max`` over its slice, rather than a Python step per
    point: the evidence cards reduce every stored point of ~50 charts on each build."""
    if max_points < 4:
        raise ValueError("max_points must be at least 4")
    n = len(points)
    if n <= max_points:
        return list(points)
    buckets = max_points // 4
    start, end = points[0][0], points[-1][0]
    width = (end - start) / buckets or 1.0
    # Bucket k holds the points whose position is in [k, k+1); one comprehension computes
    # them all, so the bisections below compare floats in C.
    positions = [(t - start) / width for t, _ in points]
    out: list[Point] = []
    low = 0
    for k in range(1, buckets):
        high = bisect_left(positions, k, low, n)
        if high > low:
            out.extend(_extremes(points[low:high]))
            low = high
    if low < n:  # the last bucket also takes the end point (position == buckets)
        out.extend(_extremes(points[low:]))
    return out


def _extremes(bucket: Sequence[Point]) -> list[Point]:
    """First, lowest, highest and last point of a bucket, each once, in time order."""
    return sorted({bucket[0], min(bucket, key=_VALUE), max(bucket, key=_VALUE), bucket[-1]})


def load_series(
    target_ids: Sequence, signal: str, start: datetime, end: datetime, *, max_points: int = 400
) -> dict[tuple[str, str], list[Point]]:
    """Series of one signal for some targets, keyed by (target id, labels), downsampled."""
    rows = (
        Observation.objects.filter(
            target_id__in=list(target_ids), signal=signal, taken_at__gte=start, taken_at__lte=end
        )
        .order_by("target_id", "labels", "taken_at")
        .values_list("target_id", "labels", "taken_at", "value")
        .iterator(chunk_size=5000)
    )
    series: dict[tuple[str, str], list[Point]] = {}
    for target_id, labels, taken_at, value in rows:
        series.setdefault((str(target_id), labels), []).append((taken_at.timestamp(), value))
    return {key: downsample(points, max_points) for key, points in series.items()}


def engine_series(
    deployment_id, signals: Sequence[str], start: datetime, end: datetime
) -> list[dict[str, list[Point]]]:
    """Each engine target's stored aggregate (unlabelled) readings of ``signals`` between
    ``start`` and ``end``, in time order, not downsampled: one dict per target, for
    ``deployments.calibration`` (registered as its reader in ``probes.apps``)."""
    rows = (
        Observation.objects.filter(
            target__deployment_id=deployment_id,
            target__kind="engine",
            signal__in=list(signals),
            labels="",
            taken_at__gte=start,
            taken_at__lte=end,
        )
        .order_by("target_id", "signal", "taken_at")
        .values_list("target_id", "signal", "taken_at", "value")
    )
    engines: dict[object, dict[str, list[Point]]] = {}
    for target_id, signal, taken_at, value in rows:
        engines.setdefault(target_id, {}).setdefault(signal, []).append(
            (taken_at.timestamp(), value)
        )
    return list(engines.values())
