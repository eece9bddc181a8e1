"""Budget constants an engine cannot report, proposed from the deployment's own stored
observations over a window the commander picks (issue 17: "one-click calibration").

The engine reports its KV pool and limits (``deployments.proposals``) but not the TTFT
target, the ITL ceiling or the prefill cost per token: those are what the deployment
*does*, so they are read off what it did while nothing was wrong (an idle or quiet
window). Each proposal says where it came from: the signal, the window, how many
readings and which quantile. The commander accepts it by saving the form; nothing here
writes anything.

Absence is not evidence: a constant with fewer than ``MIN_SAMPLES`` readings, or readings
spanning less than ``MIN_SPAN_S``, gets no proposal but the reason instead.

The rules are the real-engine test bed's (``realengine``), which sizes its incidents
against constants measured on an idle engine; it calls the same functions:

- TTFT target: ``IDLE_TTFT_FACTOR`` idle TTFTs (``ttft_target_from_idle``).
- ITL ceiling: ``ITL_TAIL_MARGIN`` x the engine's own ITL tail with no incident
  (``itl_ceiling_over_tail``): a ceiling under the machine's own tail is about the
  machine, not about prefill.
- Prefill cost: the engine's mean prefill time per request over the new (uncached)
  prompt tokens it computed per request. It includes a request's fixed cost (the
  test bed measures the slope between two prompt lengths instead, which needs probes
  this page does not send), so it is an upper bound, and said so.

This app sits below probes: it never reads observations. The probes app registers a
reader (``register_reader``) and ``propose`` is a pure function of the points it returns.
Django-free, so the test bed can import it without a settings module.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

Point = tuple[float, float]  # (unix seconds, value)
Series = Mapping[str, Sequence[Point]]  # one engine's (one replica's) readings by signal
# reader(deployment_id, signals, start, end) -> one Series per engine target (replica):
# each engine's aggregate series, so that signals read at the same poll pair up.
Reader = Callable[[object, Sequence[str], datetime, datetime], list[Series]]

MIN_SAMPLES = 8
MIN_SPAN_S = 300.0
IDLE_TTFT_FACTOR = 10.0
ITL_TAIL_MARGIN = 1.5
TAIL_QUANTILE = 0.95

# The signals each constant reads (probes/observe.py's names; latencies in seconds).
TTFT_SIGNAL = "ttft_p50"
ITL_SIGNAL = "itl_p99"
PREFILL_TIME_SIGNAL = "prefill_time_mean"
PREFILL_TOKENS_SIGNAL = "prefill_kv_computed_tokens_mean"
SIGNALS = (TTFT_SIGNAL, ITL_SIGNAL, PREFILL_TIME_SIGNAL, PREFILL_TOKENS_SIGNAL)

_READERS: list[Reader] = []


def ttft_target_from_idle(idle_ttft_ms: float, *, floor_ms: float = 0.0) -> float:
    """The TTFT a deployment is held to: ``IDLE_TTFT_FACTOR`` idle TTFTs, at least
    ``floor_ms``; a slower machine gets a proportionally looser target."""
    return round(max(floor_ms, IDLE_TTFT_FACTOR * idle_ttft_ms), 1)


def itl_ceiling_over_tail(tail_ms: float) -> float:
    """The lowest ITL ceiling that says something about prefill rather than the machine:
    ``ITL_TAIL_MARGIN`` x its own ITL tail with no incident."""
    return ITL_TAIL_MARGIN * tail_ms


def decidable_threshold(
    target: float, bounds: Sequence[float], low: float, high: float
) -> float | None:
    """The histogram bucket bound nearest ``target`` (on a log scale) strictly between
    ``low`` and ``high``, or None when no bound lies there.

    A latency quantile read off an engine's histogram is known only to its bucket: against
    a threshold inside a bucket (15 ms, in vLLM's 10-25 ms ITL bucket) the verdict is the
    linear interpolation's guess, and verification cannot decide it (a p99 "of 22 ms"
    may be 11 ms). On a bound, "p99 <= 25 ms" is exactly "99 % of the observations in
    the buckets up to 25 ms", which the counts say."""
    inside = [b for b in bounds if low < b < high and math.isfinite(b) and b > 0]
    if target <= 0 or not inside:
        return None
    return min(inside, key=lambda b: (abs(math.log(b / target)), b))


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values``, linear between closest ranks (``q`` in [0, 1])."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Source:
    """Where a proposal came from, as the page shows it."""

    signal: str
    start: float  # the window asked for (unix seconds)
    end: float
    samples: int  # readings used
    span_s: float  # first to last reading used
    statistic: str  # "median", "p95" ...

    @property
    def window_minutes(self) -> float:
        return (self.end - self.start) / 60


@dataclass(frozen=True)
class Estimate:
    """A proposed value for one budget field, or the reason there is none."""

    field: str
    current: float
    source: Source
    value: float | None = None
    rule: str = ""
    reason: str = ""  # why no value (too few readings, too short a span)

    @property
    def proposed(self) -> bool:
        return self.value is not None

    @property
    def changes(self) -> bool:
        return self.value is not None and self.value != self.current


def _finite(points: Sequence[Point]) -> list[Point]:
    return sorted((t, v) for t, v in points if math.isfinite(t) and math.isfinite(v))


def _enough(points: Sequence[Point], what: str) -> str:
    """'' when ``points`` can carry a proposal, else why not."""
    if len(points) < MIN_SAMPLES:
        return (
            f"{len(points)} reading{'s' if len(points) != 1 else ''} of {what} in the window; "
            f"at least {MIN_SAMPLES} are needed (no traffic, or the engine not polled?)"
        )
    span = points[-1][0] - points[0][0]
    if span < MIN_SPAN_S:
        return (
            f"the readings of {what} span {span:.0f} s; at least {MIN_SPAN_S:.0f} s are "
            "needed to tell a steady value from a moment"
        )
    return ""


def _estimate(
    field: str,
    current: float,
    signal: str,
    points: Sequence[Point],
    window: tuple[float, float],
    statistic: str,
    compute: Callable[[list[float]], tuple[float, str]],
) -> Estimate:
    used = _finite(points)
    span = used[-1][0] - used[0][0] if used else 0.0
    source = Source(signal, window[0], window[1], len(used), span, statistic)
    reason = _enough(used, signal)
    if reason:
        return Estimate(field, current, source, reason=reason)
    value, rule = compute([v for _, v in used])
    if not math.isfinite(value) or value <= 0:
        return Estimate(field, current, source, reason=f"{signal} gave no positive value")
    return Estimate(field, current, source, value=value, rule=rule)


def propose(
    engines: Sequence[Series],
    *,
    start: float,
    end: float,
    ttft_target_ms: float,
    itl_ceiling_ms: float,
    prefill_ms_per_token: float,
) -> list[Estimate]:
    """TTFT target, ITL ceiling and prefill cost from the points of ``SIGNALS`` each
    engine (replica) stored between ``start`` and ``end`` (unix seconds), pooled; the
    current values are what the form shows beside each proposal. Latencies come in
    seconds and leave in milliseconds."""
    window = (start, end)

    def pooled(signal: str) -> list[Point]:
        return [p for engine in engines for p in engine.get(signal, ())]

    def ttft(values: list[float]) -> tuple[float, str]:
        idle = statistics.median(values) * 1000
        return ttft_target_from_idle(idle), (
            f"{IDLE_TTFT_FACTOR:g} x the median TTFT ({idle:.1f} ms)"
        )

    def itl(values: list[float]) -> tuple[float, str]:
        tail = quantile(values, TAIL_QUANTILE) * 1000
        return round(itl_ceiling_over_tail(tail), 1), (
            f"{ITL_TAIL_MARGIN:g} x the ITL tail ({tail:.1f} ms: p{TAIL_QUANTILE * 100:.0f} "
            "of the p99 readings)"
        )

    # Prefill: one ratio per engine and poll that has both, time (s) over new tokens.
    per_token: list[Point] = []
    for engine in engines:
        tokens = {t: v for t, v in _finite(engine.get(PREFILL_TOKENS_SIGNAL, ())) if v > 0}
        per_token += [
            (t, v * 1000 / tokens[t])
            for t, v in _finite(engine.get(PREFILL_TIME_SIGNAL, ()))
            if t in tokens
        ]

    def prefill(values: list[float]) -> tuple[float, str]:
        cost = statistics.median(values)
        return round(cost, 5), (
            "median of the mean prefill time per request over the new prompt tokens it "
            "computed (an upper bound: a request's fixed cost is in it)"
        )

    return [
        _estimate(
            "ttft_target_ms", ttft_target_ms, TTFT_SIGNAL,
            pooled(TTFT_SIGNAL), window, "median", ttft,
        ),
        _estimate(
            "itl_ceiling_ms", itl_ceiling_ms, ITL_SIGNAL,
            pooled(ITL_SIGNAL), window, f"p{TAIL_QUANTILE * 100:.0f}", itl,
        ),
        _estimate(
            "prefill_ms_per_token", prefill_ms_per_token,
            f"{PREFILL_TIME_SIGNAL} / {PREFILL_TOKENS_SIGNAL}",
            per_token, window, "median", prefill,
        ),
    ]  # fmt: skip


def register_reader(reader: Reader) -> None:
    """Let ``reader`` supply a deployment's stored engine series (the probes app does)."""
    if reader not in _READERS:
        _READERS.append(reader)


def read(deployment_id, start: datetime, end: datetime) -> list[Series]:
    """What the registered readers stored of ``SIGNALS`` for the deployment: one Series
    per engine target."""
    return [engine for reader in _READERS for engine in reader(deployment_id, SIGNALS, start, end)]
