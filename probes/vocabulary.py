"""The signals probes record, by source: what a playbook measure may name, and how each
value is read as evidence.

Owned by the probes, which record the signals (the sources and their patterns are the
probe kinds' entries in ``probes.kinds``); the playbook loader and the evaluation above
read it. A typo in a playbook fails when the file loads instead of reading nothing
forever (a test compares the patterns with what probes/observe.py records on real
scrapes).
"""

from __future__ import annotations

import functools
import re

from probes.kinds import KINDS, Source, Values
from probes.observe import CHUNK_BUDGET_UNKNOWN

SOURCE_BY_NAME: dict[str, Source] = {k.source.name: k.source for k in KINDS}
SOURCES: tuple[str, ...] = tuple(SOURCE_BY_NAME)


def known_signal(source: str, signal: str) -> bool:
    found = SOURCE_BY_NAME.get(source)
    return bool(found and found.signals.match(signal))


# What a derived source's value is, for how much data it takes to be evidence
# (evaluation): a counter's rate over the scrapes so far, a histogram window's quantile
# (interpolated inside a bucket) or mean (of however many observations there were), or a
# gauge read as it is. Prometheus answers are read as gauges: its buckets never reach us.
# A profiler artifact's signal is a summary of the whole artifact (its own span), one
# value per upload: not a sample of a window.
SIGNAL_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("rate", re.compile(r"_rate$")),
    ("quantile", re.compile(r"_p[0-9]{2}$")),
    ("mean", re.compile(r"_mean$")),
)


def signal_kind(source: str, signal: str) -> str:
    """rate | quantile | mean | summary | gauge."""
    found = SOURCE_BY_NAME.get(source)
    if found is None:
        return "gauge"
    if found.values is Values.SUMMARY:
        return "summary"
    if found.values is Values.DERIVED:
        for kind, pattern in SIGNAL_KINDS:
            if pattern.search(signal):
                return kind
    return "gauge"


def companions(source: str, signal: str) -> dict[str, str]:
    """The signals (by role) that say what a derived value rests on, recorded beside it
    by probes/observe.py: ``span`` (seconds of scrapes behind a rate), ``lo``/``hi`` (the
    bucket a quantile lies in), ``count`` (observations behind a histogram's mean)."""
    found = SOURCE_BY_NAME.get(source)
    if found is None or not found.companions:
        return {}
    kind = signal_kind(source, signal)
    if kind == "rate":
        return {"span": "scrape_span_s"}
    if kind == "quantile":
        return {"lo": f"{signal}_lo", "hi": f"{signal}_hi"}
    if kind == "mean":
        return {"count": f"{signal.removesuffix('_mean')}_window_count"}
    return {}


_BOUND = re.compile(r"(.+_p[0-9]{2})_(lo|hi)$")


@functools.lru_cache(maxsize=4096)
def bound_of(signal: str) -> tuple[str, str] | None:
    """``(quantile signal, "lo" | "hi")`` when ``signal`` names a quantile's bucket bound
    (``ttft_p95_lo``), which is stored in the quantile's own row (``Observation.lo`` /
    ``.hi``), else None. Cached: the store asks for every row of every poll, and an
    engine's signal names repeat each cycle."""
    found = _BOUND.match(signal)
    return (found[1], found[2]) if found else None


def by_target(source: str) -> bool:
    """Whether the source's series are told apart by the target they came from (an
    artifact's are told apart by the artifact: its label)."""
    found = SOURCE_BY_NAME.get(source)
    return found is None or found.by_target


def aggregate_only(source: str) -> bool:
    """Whether the source's labelled series are per-rank detail left out of the view."""
    found = SOURCE_BY_NAME.get(source)
    return bool(found and found.aggregate_only)


# The unit of a signal's value, read off its name (the probes name what they record that
# way: ``_pct``, ``_mhz``, ``_mib``, ``_rate`` ...). Ordered: the first match wins, so the
# specific names come before the general suffixes (``cache_hit_rate`` is a fraction, not
# a rate per second; ``iteration_tokens_p99`` counts tokens, not seconds). Engine latency
# histograms (TTFT, ITL, queue, prefill, e2e) are in seconds in every engine's /metrics.
UNITS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"hit_rate$"), "fraction"),
    (re.compile(r"_pct$"), "%"),
    (re.compile(r"_mhz$"), "MHz"),
    (re.compile(r"_mib$"), "MiB"),
    (re.compile(r"_bytes_per_s$"), "B/s"),
    (re.compile(r"_bytes$"), "B"),
    (re.compile(r"_ms$"), "ms"),
    (re.compile(r"_c$"), "°C"),
    (re.compile(r"_w$"), "W"),
    (re.compile(r"tokens_rate$"), "tokens/s"),
    (re.compile(r"_rate$"), "/s"),
    (re.compile(r"tokens_(p[0-9]{2}(_lo|_hi)?|max_hi)$"), "tokens"),
    (re.compile(r"_p[0-9]{2}(_lo|_hi)?$|_mean$|_s$"), "s"),
    (re.compile(r"usage$"), "fraction"),
    (re.compile(r"^requests_"), "requests"),
    (re.compile(r"^log_events$"), "events"),
    (re.compile(r"^log_chunk_budget_tokens$"), "tokens"),
)


# Values a probe records to say "not known since then" (a log's chunk budget after a
# restart whose budget line is not read yet): they end the standing of the value before
# them, and evaluation reads them as no value at all.
UNKNOWN_MARKS: dict[tuple[str, str], float] = {
    ("log", "log_chunk_budget_tokens"): CHUNK_BUDGET_UNKNOWN
}


def unit_of(signal: str) -> str:
    """``ttft_p95`` -> ``s``; ``gpu_sm_clock_mhz`` -> ``MHz``; ``""`` when the name says
    nothing (a count)."""
    for pattern, unit in UNITS:
        if pattern.search(signal):
            return unit
    return ""


def with_unit(value: float, signal: str) -> str:
    """A value as a person reads it beside a threshold: ``0.95 fraction`` is ``95 %``."""
    unit = unit_of(signal)
    if unit == "fraction":
        return f"{value * 100:.3g} %"
    return f"{value:.4g} {unit}".rstrip()
