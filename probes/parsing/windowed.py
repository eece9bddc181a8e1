"""Windowed statistics over consecutive scrapes, with Prometheus's exact semantics.

Atlas polls engines itself, so there is often no Prometheus to ask; but operators compare
what Atlas shows with their Grafana panels, so ``rate``/``increase`` and
``histogram_quantile(q, rate(x_bucket[w]))`` must give the numbers Prometheus gives.

Ported from prometheus/prometheus (read at commit d15adb9, 2026-08):

* ``promql/functions.go`` ``extrapolatedRate`` (float samples, no start-timestamp
  support): counter resets add the pre-reset value; extrapolate to each window edge when
  the gap is below 1.1x the average sample interval, else by half an interval; counters are
  not extrapolated below zero. Since v3.6 the zero clamp is applied *after* the
  half-interval cap (before v3.6 it came first); both orders agree unless the counter's
  zero point falls between the two candidate start points.
* ``promql/quantile.go`` ``BucketQuantile``: sort by ``le``; +Inf required; coalesce equal
  bounds; force monotonicity, silently equalising relative deltas < 1e-12 (added in v2.49;
  earlier versions only forced monotonicity); rank in the +Inf bucket returns the
  second-highest bound; lowest bucket interpolates from 0 unless its bound is <= 0.

Timestamps are seconds (float) and are rounded to milliseconds, as Prometheus stores them,
so the arithmetic is the same to the last bit. Range selection is left-open
``(t - range, t]`` as in Prometheus 3.x (2.x included the left edge).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence

__all__ = [
    "Point",
    "bucket_interval",
    "bucket_quantile",
    "delta",
    "histogram_quantile_over_window",
    "increase",
    "observed_increase",
    "rate",
    "sampled_span",
    "select_window",
]

Point = tuple[float, float]
SMALL_DELTA_TOLERANCE = 1e-12
_MIN_NORMAL = 2.2250738585072014e-308


def _ms(t: float) -> int:
    return round(t * 1000)


def select_window(points: Sequence[Point], range_s: float, eval_time: float) -> list[Point]:
    """Points in ``(eval_time - range_s, eval_time]``, in time order."""
    start, end = _ms(eval_time) - _ms(range_s), _ms(eval_time)
    return sorted((p for p in points if start < _ms(p[0]) <= end), key=lambda p: p[0])


def _extrapolated(
    points: Sequence[Point],
    range_s: float,
    eval_time: float,
    is_counter: bool,
    is_rate: bool,
    clamp_first: bool = False,
) -> float | None:
    window = select_window(points, range_s, eval_time)
    if len(window) < 2:
        return None
    range_end = _ms(eval_time)
    range_start = range_end - _ms(range_s)
    first_t, first_v = _ms(window[0][0]), window[0][1]
    last_t, last_v = _ms(window[-1][0]), window[-1][1]
    result = last_v - first_v
    if is_counter:
        prev = first_v
        for _, value in window[1:]:
            if value < prev:
                result += prev
            prev = value
    to_start = (first_t - range_start) / 1000
    to_end = (range_end - last_t) / 1000
    sampled = (last_t - first_t) / 1000
    average = sampled / (len(window) - 1)
    threshold = average * 1.1
    if clamp_first:
        if is_counter and result > 0 and first_v >= 0:
            to_start = min(to_start, sampled * (first_v / result))
        if to_start >= threshold:
            to_start = average / 2
    else:
        if to_start >= threshold:
            to_start = average / 2
        if is_counter and result > 0 and first_v >= 0:
            to_start = min(to_start, sampled * (first_v / result))
    if to_end >= threshold:
        to_end = average / 2
    factor = (sampled + to_start + to_end) / sampled if sampled != 0 else 1.0
    if is_rate:
        factor /= _ms(range_s) / 1000
    return result * factor


def increase(
    points: Sequence[Point], range_s: float, eval_time: float, *, before_v3_6: bool = False
) -> float | None:
    """PromQL ``increase(x[range])`` at ``eval_time``; None where Prometheus has no sample.

    ``before_v3_6`` reproduces older servers' order of the zero clamp (see module doc), for
    comparing with a Prometheus that an operator actually runs.
    """
    return _extrapolated(points, range_s, eval_time, True, False, before_v3_6)


def rate(
    points: Sequence[Point], range_s: float, eval_time: float, *, before_v3_6: bool = False
) -> float | None:
    """PromQL ``rate(x[range])`` at ``eval_time``; None where Prometheus has no sample."""
    return _extrapolated(points, range_s, eval_time, True, True, before_v3_6)


def delta(points: Sequence[Point], range_s: float, eval_time: float) -> float | None:
    """PromQL ``delta(g[range])`` for gauges: no reset handling, may be negative."""
    return _extrapolated(points, range_s, eval_time, is_counter=False, is_rate=False)


def _almost_equal(a: float, b: float, epsilon: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    abs_sum = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or abs_sum < _MIN_NORMAL:
        return diff < epsilon * _MIN_NORMAL
    return diff / min(abs_sum, 1.7976931348623157e308) < epsilon


def _prepared(
    buckets: Sequence[tuple[float, float]], ignore_small_deltas: bool
) -> list[list[float]] | None:
    """Buckets as ``histogram_quantile`` reads them: sorted by ``le``, equal bounds
    coalesced, counts forced monotonic; None where it would answer NaN for any q."""
    if not buckets:
        return None
    ordered = sorted(buckets, key=lambda b: b[0])
    if ordered[-1][0] != math.inf:
        return None
    coalesced: list[list[float]] = []
    for bound, count in ordered:
        if coalesced and coalesced[-1][0] == bound:
            coalesced[-1][1] += count
        else:
            coalesced.append([bound, count])
    prev = coalesced[0][1]
    for b in coalesced[1:]:
        curr = b[1]
        if curr == prev:
            continue
        if curr < prev or (
            ignore_small_deltas and _almost_equal(prev, curr, SMALL_DELTA_TOLERANCE)
        ):
            b[1] = prev
            continue
        prev = curr
    if len(coalesced) < 2 or coalesced[-1][1] == 0:
        return None
    return coalesced


def _rank_index(coalesced: list[list[float]], rank: float) -> int:
    """sort.Search over all but the +Inf bucket: first index with count >= rank."""
    for i in range(len(coalesced) - 1):
        if coalesced[i][1] >= rank:
            return i
    return len(coalesced) - 1


def bucket_quantile(
    q: float, buckets: Sequence[tuple[float, float]], *, ignore_small_deltas: bool = True
) -> float:
    """PromQL ``histogram_quantile`` over classic buckets ``(le, cumulative count)``.

    ``ignore_small_deltas=False`` is the pre-2.49 monotonicity fix (running maximum only).
    """
    if math.isnan(q) or not 0 <= q <= 1:
        return _quantile_of(q, None)
    return _quantile_of(q, _prepared(buckets, ignore_small_deltas))


def _quantile_of(q: float, coalesced: list[list[float]] | None) -> float:
    """``bucket_quantile`` on buckets already through ``_prepared``."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if coalesced is None:
        return math.nan
    rank = q * coalesced[-1][1]
    idx = _rank_index(coalesced, rank)
    if idx == len(coalesced) - 1:
        return coalesced[-2][0]
    if idx == 0 and coalesced[0][0] <= 0:
        return coalesced[0][0]
    start = 0.0
    end, count = coalesced[idx]
    if idx > 0:
        start = coalesced[idx - 1][0]
        count -= coalesced[idx - 1][1]
        rank -= coalesced[idx - 1][1]
    return start + (end - start) * _go_div(rank, count)


def bucket_interval(
    q: float, buckets: Sequence[tuple[float, float]], *, ignore_small_deltas: bool = True
) -> tuple[float, float] | None:
    """The bucket ``(lower, upper]`` that holds the q-quantile's rank: all the buckets say
    about it. ``histogram_quantile``'s value is interpolated inside it, assuming the
    observations spread evenly; the true quantile may be anywhere in it. The lowest bucket
    starts at 0 (as Prometheus assumes) unless its bound is <= 0; a rank in the +Inf bucket
    gives ``(second-highest bound, inf)``. None where the quantile is NaN."""
    if math.isnan(q) or not 0 <= q <= 1:
        return None
    return _interval_of(q, _prepared(buckets, ignore_small_deltas))


def _interval_of(q: float, coalesced: list[list[float]] | None) -> tuple[float, float] | None:
    """``bucket_interval`` on buckets already through ``_prepared``."""
    if math.isnan(q) or not 0 <= q <= 1 or coalesced is None:
        return None
    idx = _rank_index(coalesced, q * coalesced[-1][1])
    if idx == len(coalesced) - 1:
        return coalesced[-2][0], math.inf
    if idx == 0 and coalesced[0][0] <= 0:
        return -math.inf, coalesced[0][0]
    below = coalesced[idx - 1] if idx > 0 else [0.0, 0.0]
    if coalesced[idx][1] == below[1]:
        return None  # q = 0 at an empty bucket: the quantile is NaN
    return below[0], coalesced[idx][0]


def _go_div(a: float, b: float) -> float:
    """IEEE division as in Go (q=0 on an empty lowest bucket gives 0/0 = NaN, not a crash)."""
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def histogram_quantile_over_window(
    q: float,
    bucket_points: Mapping[float, Sequence[Point]],
    range_s: float,
    eval_time: float,
    *,
    before_v3_6: bool = False,
) -> float:
    """``histogram_quantile(q, rate(x_bucket[range]))`` from each bucket's raw points.

    ``bucket_points`` maps ``le`` to that bucket counter's points. A bucket whose rate is
    undefined (fewer than two points in the window) is absent, exactly as in PromQL; if
    that is the +Inf bucket the result is NaN.
    """
    rates = []
    for bound, points in bucket_points.items():
        r = rate(points, range_s, eval_time, before_v3_6=before_v3_6)
        if r is not None:
            rates.append((float(bound), r))
    return bucket_quantile(q, rates, ignore_small_deltas=True)


def histogram_quantiles_over_window(
    qs: Sequence[float],
    bucket_points: Mapping[float, Sequence[Point]],
    range_s: float,
    eval_time: float,
    *,
    before_v3_6: bool = False,
) -> list[float]:
    """Several quantiles of one histogram: each bucket's rate is computed once, not per q."""
    rates = []
    for bound, points in bucket_points.items():
        r = rate(points, range_s, eval_time, before_v3_6=before_v3_6)
        if r is not None:
            rates.append((float(bound), r))
    return [bucket_quantile(q, rates, ignore_small_deltas=True) for q in qs]


def histogram_quantiles_and_buckets_over_window(
    qs: Sequence[float],
    bucket_points: Mapping[float, Sequence[Point]],
    range_s: float,
    eval_time: float,
) -> list[tuple[float, tuple[float, float] | None]]:
    """Each quantile with the bucket that holds it (``bucket_interval``), from one set of
    bucket rates."""
    rates = []
    for bound, points in bucket_points.items():
        r = rate(points, range_s, eval_time)
        if r is not None:
            rates.append((float(bound), r))
    return quantiles_and_buckets(qs, rates)


def observed_increase(points: Sequence[Point], range_s: float, eval_time: float) -> float | None:
    """How much a counter grew between its first and last sample in the window, with
    resets, and *not* extrapolated: for a histogram's count, how many observations there
    actually were behind a windowed mean or quantile. None with fewer than two samples."""
    window = select_window(points, range_s, eval_time)
    if len(window) < 2:
        return None
    grown = window[-1][1] - window[0][1]
    prev = window[0][1]
    for _, value in window[1:]:
        if value < prev:
            grown += prev
        prev = value
    return grown


def sampled_span(times: Sequence[float], range_s: float, eval_time: float) -> float:
    """Seconds between the first sample in ``(eval_time - range_s, eval_time]`` and
    ``eval_time``: how much time a windowed rate was actually measured over (0 with only
    the current sample)."""
    start, end = _ms(eval_time) - _ms(range_s), _ms(eval_time)
    inside = [_ms(t) for t in times if start < _ms(t) <= end]
    return (end - min(inside)) / 1000 if inside else 0.0


class Grid:
    """One window's sample times, selected once for the many series sampled at them.

    An engine scrape carries ~250 counters and buckets, all sampled at the same scrape
    times. ``rate``/``observed_increase`` select, sort and convert those times per series;
    a grid does it once, and each series pays only for its values. Every figure is the
    same float operations in the same order as ``rate`` and ``observed_increase`` on the
    series' points, so the results are identical to the last bit (a test compares them).

    ``times`` is every sample time, in any order; a series given to a grid has a value
    at each of them (``values[i]`` at ``times[i]``).
    """

    __slots__ = ("_inside", "_rate_parts", "_slice", "span")

    def __init__(self, times: Sequence[float], range_s: float, eval_time: float) -> None:
        start, end = _ms(eval_time) - _ms(range_s), _ms(eval_time)
        stamps = [_ms(t) for t in times]
        order = sorted(range(len(times)), key=times.__getitem__)
        self._inside = [i for i in order if start < stamps[i] <= end]
        # The usual case: the window is a run of the times as given (oldest first).
        run = range(self._inside[0], self._inside[-1] + 1) if self._inside else None
        self._slice = slice(run.start, run.stop) if run and self._inside == list(run) else None
        inside = [stamps[i] for i in self._inside]
        self.span = (end - min(inside)) / 1000 if inside else 0.0
        self._rate_parts: tuple[float, float, float, float, float, float] | None = None
        if len(inside) >= 2:
            first_t, last_t = inside[0], inside[-1]
            to_start = (first_t - start) / 1000
            to_end = (end - last_t) / 1000
            sampled = (last_t - first_t) / 1000
            average = sampled / (len(inside) - 1)
            self._rate_parts = (
                to_start, to_end, sampled, average, average * 1.1, _ms(range_s) / 1000
            )  # fmt: skip

    def _grown(self, values: Sequence[float]) -> tuple[float, float] | None:
        """(first value in the window, increase with counter resets added back)."""
        if self._rate_parts is None:
            return None
        window = values[self._slice] if self._slice else [values[i] for i in self._inside]
        first_v = window[0]
        result = window[-1] - first_v
        # Counter resets are rare: look for one in C before walking the window.
        if any(map(operator.lt, window[1:], window)):
            prev = first_v
            for value in window:
                if value < prev:
                    result += prev
                prev = value
        return first_v, result

    def rate(self, values: Sequence[float]) -> float | None:
        """``rate(values[range])`` at the grid's evaluation time (see :func:`rate`)."""
        grown = self._grown(values)
        if grown is None:
            return None
        first_v, result = grown
        assert self._rate_parts is not None
        to_start, to_end, sampled, average, threshold, range_seconds = self._rate_parts
        if to_start >= threshold:
            to_start = average / 2
        if result > 0 and first_v >= 0:
            to_start = min(to_start, sampled * (first_v / result))
        if to_end >= threshold:
            to_end = average / 2
        factor = (sampled + to_start + to_end) / sampled if sampled != 0 else 1.0
        factor /= range_seconds
        return result * factor

    def observed_increase(self, values: Sequence[float]) -> float | None:
        """See :func:`observed_increase`."""
        grown = self._grown(values)
        return None if grown is None else grown[1]

    def quantiles_and_buckets(
        self, qs: Sequence[float], bucket_values: Mapping[float, Sequence[float]]
    ) -> list[tuple[float, tuple[float, float] | None]]:
        """:func:`histogram_quantiles_and_buckets_over_window` for buckets sampled on
        the grid (``le`` -> values)."""
        rates = []
        for bound, values in bucket_values.items():
            r = self.rate(values)
            if r is not None:
                rates.append((float(bound), r))
        return quantiles_and_buckets(qs, rates)


def quantiles_and_buckets(
    qs: Sequence[float], buckets: Sequence[tuple[float, float]]
) -> list[tuple[float, tuple[float, float] | None]]:
    """``[(bucket_quantile(q, buckets), bucket_interval(q, buckets)) for q in qs]``, with
    the buckets sorted, coalesced and made monotonic once instead of twice per q."""
    coalesced = _prepared(buckets, True)
    return [(_quantile_of(q, coalesced), _interval_of(q, coalesced)) for q in qs]
