"""Fixed-bucket histogram with weighted observations (many tokens see one step duration)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence


class Histogram:
    """Per-bucket counts (not cumulative) plus sum and count; cumulated only when rendered."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # last slot is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, n: int = 1) -> None:
        # `le` is inclusive: a value equal to a bound belongs to that bucket.
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def cumulative(self) -> list[int]:
        out = []
        acc = 0
        for c in self.counts:
            acc += c
            out.append(acc)
        return out

    def quantile(self, q: float) -> float:
        """Prometheus-style linear interpolation inside the bucket (for tests and stats lines)."""
        if self.count == 0:
            return float("nan")
        rank = q * self.count
        acc = 0
        prev_bound = 0.0
        for i, c in enumerate(self.counts):
            if acc + c >= rank and c > 0:
                if i == len(self.bounds):
                    return self.bounds[-1]
                upper = self.bounds[i]
                return prev_bound + (upper - prev_bound) * (rank - acc) / c
            acc += c
            if i < len(self.bounds):
                prev_bound = self.bounds[i]
        return self.bounds[-1]

    def copy(self) -> Histogram:
        h = Histogram.__new__(Histogram)
        h.bounds = self.bounds
        h.counts = list(self.counts)
        h.sum = self.sum
        h.count = self.count
        return h

    def minus(self, other: Histogram) -> Histogram:
        """Window delta (self - other), for windowed quantiles in tests and stats."""
        h = self.copy()
        h.counts = [a - b for a, b in zip(self.counts, other.counts, strict=True)]
        h.sum -= other.sum
        h.count -= other.count
        return h
