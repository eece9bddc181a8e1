"""Charts get bounded series that keep spikes; raw data outside investigations expires."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from investigations.models import Investigation
from probes.models import Observation, Poll, TargetKind
from probes.retention import prune
from probes.series import downsample, load_series
from tests.support import builders

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_a_single_spike_survives_downsampling():
    points = [(float(t), 0.048) for t in range(10_000)]
    points[7_321] = (7_321.0, 0.300)  # one 300 ms ITL step
    reduced = downsample(points, 400)
    assert len(reduced) <= 400
    assert max(v for _, v in reduced) == 0.300
    assert reduced[0] == points[0] and reduced[-1] == points[-1]


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=2000),
    st.integers(4, 200),
)
def test_downsampling_is_bounded_ordered_and_keeps_extremes(values, max_points):
    points = [(float(i), v) for i, v in enumerate(values)]
    reduced = downsample(points, max_points)
    if len(points) <= max_points:
        assert reduced == points
    assert len(reduced) <= max(max_points, len(points)) and len(reduced) <= len(points)
    assert len(points) <= max_points or len(reduced) <= max_points
    assert [t for t, _ in reduced] == sorted(t for t, _ in reduced)
    assert min(v for _, v in reduced) == min(values)
    assert max(v for _, v in reduced) == max(values)


def _reference_downsample(points, max_points):
    """The reduction spelled out one point at a time: which bucket each point falls in,
    then each bucket's first, lowest, highest and last point."""
    if len(points) <= max_points:
        return list(points)
    buckets = max_points // 4
    start, end = points[0][0], points[-1][0]
    width = (end - start) / buckets or 1.0
    grouped: dict[int, list] = {}
    for point in points:
        grouped.setdefault(min(int((point[0] - start) / width), buckets - 1), []).append(point)
    out = []
    for _, bucket in sorted(grouped.items()):
        low = min(bucket, key=lambda p: p[1])
        high = max(bucket, key=lambda p: p[1])
        out.extend(sorted({bucket[0], low, high, bucket[-1]}))
    return out


@given(
    st.lists(
        st.tuples(st.floats(0, 30, allow_nan=False), st.floats(-1e3, 1e3, allow_nan=False)),
        min_size=1,
        max_size=1500,
    ),
    st.integers(4, 120),
    st.floats(1.6e9, 1.8e9),
)
def test_downsampling_equals_the_point_by_point_reduction(steps, max_points, t0):
    """Irregular gaps, repeated timestamps and epoch-sized times: bucket edges found by
    bisection put every point where the per-point arithmetic puts it."""
    points, t = [], t0
    for gap, value in steps:
        t += round(gap, 1)  # 0.0 gaps: several readings stamped alike
        points.append((t, value))
    assert downsample(points, max_points) == _reference_downsample(points, max_points)


@pytest.fixture
def target(team):
    deployment = builders.deployment(team, "atlas-retention")
    return builders.target(deployment, TargetKind.ENGINE, "http://127.0.0.1:9/metrics")


def _store(target, at, value=1.0):
    Poll.objects.create(target=target, cycle_at=at, ok=True)
    Observation.objects.create(target=target, taken_at=at, signal="kv_cache_usage", value=value)


def test_raw_data_outside_investigations_expires_and_inside_is_kept(target):
    old_outside = T0
    old_inside = T0 + timedelta(days=2)
    recent = T0 + timedelta(days=9, hours=23)
    for at in (old_outside, old_inside, recent):
        _store(target, at)
    investigation = Investigation.objects.create(
        team=target.deployment.team, deployment=target.deployment, symptom="high-ttft"
    )
    Investigation.objects.filter(pk=investigation.pk).update(
        opened_at=old_inside - timedelta(minutes=10), closed_at=old_inside + timedelta(hours=1)
    )
    deleted = prune(timedelta(hours=48), now=T0 + timedelta(days=10))
    assert deleted == 2  # one poll + one observation
    kept = set(Observation.objects.values_list("taken_at", flat=True))
    assert kept == {old_inside, recent}
    assert set(Poll.objects.values_list("cycle_at", flat=True)) == {old_inside, recent}


def test_series_are_loaded_per_target_and_labels(target):
    for n in range(1000):
        Observation.objects.create(
            target=target, taken_at=T0 + timedelta(seconds=5 * n), signal="itl_p99",
            value=0.3 if n == 500 else 0.05,
        )  # fmt: skip
    series = load_series([target.pk], "itl_p99", T0, T0 + timedelta(days=1), max_points=100)
    (points,) = series.values()
    assert len(points) <= 100 and max(v for _, v in points) == 0.3
