from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probes.parsing.windowed import bucket_quantile, delta, increase, rate, select_window

INF = math.inf


def test_quantile_edge_cases_follow_promql():
    b = [(0.1, 10.0), (0.5, 20.0), (INF, 30.0)]
    assert math.isnan(bucket_quantile(math.nan, b))
    assert bucket_quantile(-0.1, b) == -INF
    assert bucket_quantile(1.1, b) == INF
    assert math.isnan(bucket_quantile(0.5, []))
    assert math.isnan(bucket_quantile(0.5, [(0.1, 1.0), (0.5, 2.0)]))  # no +Inf
    assert math.isnan(bucket_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]))  # no observations
    assert math.isnan(bucket_quantile(0.5, [(INF, 5.0)]))  # fewer than two buckets
    assert bucket_quantile(0.99, b) == 0.5  # rank in +Inf bucket: second-highest bound
    assert bucket_quantile(0.25, b) == pytest.approx(0.075)  # lowest bucket starts at 0
    assert bucket_quantile(0.5, b) == pytest.approx(0.1 + 0.4 * 5 / 10)
    assert bucket_quantile(0.1, [(-1.0, 5.0), (INF, 10.0)]) == -1.0
    # unsorted input, duplicate bounds coalesced, non-monotonic counts fixed
    assert bucket_quantile(0.5, [(INF, 30.0), (0.5, 20.0), (0.1, 10.0)]) == bucket_quantile(0.5, b)
    assert bucket_quantile(0.5, [(0.1, 4.0), (0.1, 6.0), (0.5, 20.0), (INF, 30.0)]) == (
        bucket_quantile(0.5, b)
    )
    assert math.isnan(bucket_quantile(0.0, [(1.0, 0.0), (INF, 1.0)]))  # Go's 0/0
    assert bucket_quantile(0.5, [(0.1, 10.0), (0.5, 5.0), (INF, 20.0)]) == bucket_quantile(
        0.5, [(0.1, 10.0), (0.5, 10.0), (INF, 20.0)]
    )


def test_rate_extrapolation_and_reset():
    pts = [(float(t), 100.0 + 10 * t) for t in range(1, 11)]  # every 1 s, 10/s
    assert increase(pts, 10, 10.5) == pytest.approx(90 * (9 + 0.5 + 0.5) / 9)
    assert rate(pts, 10, 10.5) == increase(pts, 10, 10.5) / 10
    reset = [(1.0, 50.0), (2.0, 60.0), (3.0, 5.0), (4.0, 15.0)]
    assert increase(reset, 4, 4.0) == pytest.approx((15 - 50 + 60) * (3 + 1 + 0) / 3)
    # gap to window start beyond 1.1x interval: extrapolate half an interval only
    assert increase([(8.0, 10.0), (9.0, 20.0), (10.0, 30.0)], 10, 10.0) == 20 * 2.5 / 2
    # zero clamp: a counter starting at 0 is not extrapolated below zero
    assert increase([(1.0, 0.0), (2.0, 10.0)], 2, 2.0) == 10.0
    assert rate([(1.0, 5.0)], 10, 2.0) is None
    assert delta([(1.0, 10.0), (2.0, 4.0)], 2, 2.0) == -12.0


def test_select_window_is_left_open():
    pts = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert select_window(pts, 2, 2.0) == [(1.0, 2.0), (2.0, 3.0)]


def test_zero_clamp_order_differs_between_versions():
    pts = [(5.0, 2.0), (6.0, 12.0), (7.0, 22.0)]  # starts mid-window, zero point at 4.8
    new, old = increase(pts, 10, 7.0), increase(pts, 10, 7.0, before_v3_6=True)
    assert new == 20 * (2 + 0.2) / 2
    assert old == 20 * (2 + 0.2) / 2  # here both agree (to_zero < half interval)
    pts = [(5.0, 8.0), (6.0, 18.0), (7.0, 28.0)]  # zero point 0.8 s back: the orders differ
    assert increase(pts, 10, 7.0) == 20 * (2 + 0.5) / 2
    assert increase(pts, 10, 7.0, before_v3_6=True) == pytest.approx(20 * (2 + 0.8) / 2)


bucket_lists = st.lists(
    st.tuples(st.floats(-10, 100, allow_nan=False), st.floats(0, 1000, allow_nan=False)),
    min_size=1,
    max_size=8,
).map(lambda bs: [*bs, (INF, max(c for _, c in bs) + 1)])


@settings(max_examples=200, deadline=None)
@given(bucket_lists, st.floats(0, 1), st.floats(0, 1))
def test_quantile_is_monotone_in_q(buckets, q1, q2):
    lo, hi = sorted((q1, q2))
    a, b = bucket_quantile(lo, buckets), bucket_quantile(hi, buckets)
    if not (math.isnan(a) or math.isnan(b)):
        assert a <= b + 1e-9 * max(1.0, abs(b))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0, 1e9, allow_nan=False), min_size=2, max_size=30),
    st.floats(0.5, 5),
    st.floats(1, 60),
)
def test_counter_rate_never_negative_even_with_resets(values, step, window):
    pts = [(1000 + i * step, v) for i, v in enumerate(values)]
    end = pts[-1][0] + step / 3
    r = rate(pts, window, end)
    assert r is None or r >= 0
    inc = increase(pts, window, end, before_v3_6=True)
    assert inc is None or inc >= 0


def test_several_quantiles_at_once_equal_one_at_a_time():
    from probes.parsing.windowed import (
        histogram_quantile_over_window,
        histogram_quantiles_over_window,
    )

    buckets = {
        0.1: [(0.0, 0.0), (30.0, 40.0)],
        0.5: [(0.0, 0.0), (30.0, 90.0)],
        1.0: [(0.0, 0.0), (30.0, 99.0)],
        math.inf: [(0.0, 0.0), (30.0, 100.0)],
    }
    qs = (0.5, 0.95, 0.99)
    together = histogram_quantiles_over_window(qs, buckets, 60.0, 30.0)
    assert together == [histogram_quantile_over_window(q, buckets, 60.0, 30.0) for q in qs]


def test_a_quantile_comes_with_the_bucket_that_holds_its_rank():
    from probes.parsing.windowed import bucket_interval

    # 100 steps: 60 up to 512 tokens, 39 more up to 1,024, one over 1,024.
    buckets = [(256.0, 10.0), (512.0, 60.0), (1024.0, 99.0), (INF, 100.0)]
    assert bucket_interval(0.5, buckets) == (256.0, 512.0)
    assert bucket_interval(0.99, buckets) == (512.0, 1024.0)
    assert bucket_interval(0.995, buckets) == (1024.0, INF)  # rank in the +Inf bucket
    assert bucket_interval(0.05, buckets) == (0.0, 256.0)  # the lowest starts at 0
    assert bucket_interval(0.5, [(1.0, 0.0), (INF, 0.0)]) is None  # no observations


@settings(max_examples=200, deadline=None)
@given(bucket_lists, st.floats(0, 1))
def test_the_interpolated_quantile_lies_inside_its_bucket(buckets, q):
    from probes.parsing.windowed import bucket_interval

    value, interval = bucket_quantile(q, buckets), bucket_interval(q, buckets)
    assert (interval is None) == math.isnan(value)
    if interval is not None:
        lo, hi = interval
        assert lo <= value <= hi or (math.isinf(hi) and value == lo)


def test_observed_increase_counts_what_happened_without_extrapolating():
    from probes.parsing.windowed import observed_increase, sampled_span

    points = [(10.0, 100.0), (15.0, 104.0), (20.0, 2.0), (25.0, 5.0)]  # a reset at 20 s
    assert observed_increase(points, 60, 25.0) == 4 + 2 + 3
    assert observed_increase(points[:1], 60, 25.0) is None
    assert sampled_span([10.0, 15.0, 20.0], 60, 20.0) == 10.0
    assert sampled_span([10.0, 15.0, 20.0], 7, 20.0) == 5.0  # left-open window
    assert sampled_span([20.0], 60, 20.0) == 0.0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(-10, 1e6, allow_nan=False), min_size=1, max_size=16),
    st.lists(st.floats(0, 90), min_size=1, max_size=16),
    st.floats(1, 90),
    st.floats(0, 20),
    st.booleans(),
)
def test_a_grid_gives_each_series_exactly_what_its_own_points_give(
    values, times, window, after, shuffled
):
    """Windowed figures of series sharing sample times, selected once: bit-identical to the
    per-series functions, whatever the order, gaps, resets or window edges."""
    from probes.parsing.windowed import (
        Grid,
        histogram_quantiles_and_buckets_over_window,
        observed_increase,
        sampled_span,
    )

    n = min(len(values), len(times))
    times, values = times[:n], values[:n]
    if shuffled:
        times = times[::-1]
    now = max(times) + after
    grid = Grid(times, window, now)
    points = list(zip(times, values, strict=True))
    same = lambda a, b: a == b or (a != a and b != b)  # noqa: E731 - NaN equals NaN here
    assert same(grid.rate(values), rate(points, window, now))
    assert same(grid.observed_increase(values), observed_increase(points, window, now))
    assert grid.span == sampled_span(times, window, now)
    doubled = [2 * v for v in values]
    buckets = {1.0: values, INF: doubled}
    expected = histogram_quantiles_and_buckets_over_window(
        (0.5, 0.99),
        {1.0: points, INF: list(zip(times, doubled, strict=True))},
        window,
        now,
    )
    got = grid.quantiles_and_buckets((0.5, 0.99), buckets)
    assert all(same(a[0], b[0]) and a[1] == b[1] for a, b in zip(got, expected, strict=True))


@settings(max_examples=300, deadline=None)
@given(bucket_lists, st.lists(st.floats(-0.5, 1.5), min_size=1, max_size=4))
def test_quantiles_and_buckets_at_once_equal_each_one_alone(buckets, qs):
    from probes.parsing.windowed import bucket_interval, quantiles_and_buckets

    got = quantiles_and_buckets(qs, buckets)
    for q, (value, bucket) in zip(qs, got, strict=True):
        alone = bucket_quantile(q, buckets)
        assert value == alone or (math.isnan(value) and math.isnan(alone))
        assert bucket == bucket_interval(q, buckets)
