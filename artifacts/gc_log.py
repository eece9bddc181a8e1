"""Python ``gc.set_debug(gc.DEBUG_STATS)`` output: collections, pauses, and latency spikes.

Why: a full (oldest-generation) collection in the engine loop stops every request for its
duration; with a large heap that is 100+ ms, which operators see as inter-token-latency
spikes with nothing in the engine metrics to explain them. DEBUG_STATS lines carry no
timestamp, so each collection is placed by the timestamped log lines around it.

Shapes accepted (CPython ``gcmodule.c`` / ``Python/gc.c``; anywhere in a line, so process
prefixes such as ``(EngineCore_DP0 pid=241) `` do not matter):

* ``gc: collecting generation N...`` (3.14 incremental collector: ``young``/``old`` too)
* ``gc: objects in each generation: a b c`` and ``gc: objects in permanent generation: p``
* ``gc: done, U unreachable, V uncollectable, 0.0123s elapsed`` (parts optional: some
  versions/paths print no elapsed time; 3.14 prints no ``done`` line at all); an
  elapsed time on the line after ``gc: done`` (``gc: 0.0123s elapsed.``) belongs to it.
  A ``done`` line whose ``collecting`` line was cut off (an excerpt's first line) is a
  collection of unknown generation (-1), its pause still known.
* vLLM's own GC debug callback (``VLLM_GC_DEBUG``, ``vllm/utils/gc_utils.py``):
  ``GC took 4442.360ms to complete. Collected 377 objects (out of 1052645) in GC
  generation 2.`` (the ``(out of N)`` part from 0.11 on). It is logged when the
  collection ends, so a timestamp on that line is the end of the pause.

Timestamps come from vLLM lines (``INFO 01-05 08:00:01 [file.py:123] ...``, the V0 form
without brackets, any log level), ISO ``2026-01-05T08:00:01(.123)`` / ``2026-01-05
08:00:01,123`` and SGLang ``[2026-01-05 08:00:01 TP0]``; vLLM's have no year, taken from
the ``year`` parameter. They are read as UTC. A collection is placed in
``[previous timestamped line, next timestamped line]``; without an ``elapsed`` value its
pause is estimated as that gap and flagged ``duration_estimated``.

Signals (absent when the log cannot give them):

* ``artifact_gc_collections`` - collections seen (count)
* ``artifact_gc_pause_max_ms``, ``artifact_gc_pause_p99_ms`` - over all collections (ms)
* ``artifact_gc_pauses_per_min`` - collections per minute of log time (1/min)
* ``artifact_gc_gen2_pause_max_ms`` - longest oldest-generation (2) pause (ms)
* ``artifact_gc_gen2_per_min`` - oldest-generation collections per minute (1/min)
* ``artifact_gc_spike_share`` - share of latency spikes inside a pause window (0-1), only
  when latency points were given
"""

from __future__ import annotations

import codecs
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from artifacts.bounded import DEFAULT_LIMITS, Deadline, Limits, stream
from artifacts.stats import percentile

MAX_LINE_CHARS = 64 * 1024
MAX_COLLECTIONS = 2_000_000
LONG_PAUSE_MS = 50.0
MIN_LONG_PAUSES = 3
MIN_LONG_PER_MIN = 0.5

_COLLECTING = re.compile(r"gc: collecting (?:generation )?(\d+|young|old|incremental)\b")
_EACH = re.compile(r"gc: objects in each generation:((?: \d+)+)")
_PERMANENT = re.compile(r"gc: objects in permanent generation: (\d+)")
_DONE = re.compile(
    r"gc: done(?:, (\d+) unreachable)?(?:, (\d+) uncollectable)?(?:, (\d+(?:\.\d+)?)s elapsed)?"
)
_VLLM_TS = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\b"
)
_ISO_TS = re.compile(r"\b(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_ELAPSED_ONLY = re.compile(r"(?:^|gc: |[\s,(])(\d+(?:\.\d+)?)s elapsed\.?\)?\s*$")
_VLLM_GC = re.compile(
    r"GC took (\d+(?:\.\d+)?) ?ms to complete\. Collected (\d+|\?) objects"
    r"(?: \(out of (\d+)\))? in GC generation (\d+)"
)
_GEN_WORDS = {"young": 0, "incremental": 1, "old": 2}
UNKNOWN_GENERATION = -1


@dataclass
class Collection:
    """One collection. Times are Unix seconds (UTC); None where the log cannot place it."""

    generation: int
    line: int
    time_lo: float | None = None
    time_hi: float | None = None
    elapsed_s: float | None = None
    duration_estimated: bool = False
    unreachable: int | None = None
    uncollectable: int | None = None
    objects: tuple[int, ...] = ()

    @property
    def time(self) -> float | None:
        return self.time_lo if self.time_lo is not None else self.time_hi

    def as_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "line": self.line,
            "time": self.time,
            "time_hi": self.time_hi,
            "pause_ms": None if self.elapsed_s is None else round(self.elapsed_s * 1e3, 3),
            "duration_estimated": self.duration_estimated,
            "unreachable": self.unreachable,
            "uncollectable": self.uncollectable,
        }


@dataclass
class GcLog:
    """Collections in log order plus the log's time span."""

    collections: list[Collection]
    lines: int
    timestamped_lines: int
    first_time: float | None
    last_time: float | None
    long_lines: int = 0
    dropped_collections: int = 0


def parse_timestamp(line: str, year: int) -> float | None:
    """Unix seconds of a log line's timestamp (UTC), or None when it has none."""
    m = _VLLM_TS.search(line)
    if m:
        mo, day, hh, mm, ss, frac = m.groups()
        y = year
    else:
        m = _ISO_TS.search(line)
        if not m:
            return None
        y_s, mo, day, hh, mm, ss, frac = m.groups()
        y = int(y_s)
    try:
        dt = datetime(y, int(mo), int(day), int(hh), int(mm), int(ss), tzinfo=UTC)
    except ValueError:
        return None
    t = dt.timestamp()
    if frac:
        t += int(frac[:6]) / 10 ** len(frac[:6])
    return t


def _lines(chunks: Iterable[bytes]) -> Iterator[tuple[str, bool]]:
    """Decoded lines (invalid UTF-8 replaced: logs are not strict), over-long ones cut."""
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    rest = ""
    for chunk in chunks:
        text = rest + dec.decode(chunk)
        parts = text.split("\n")
        rest = parts.pop()
        for p in parts:
            yield (p[:MAX_LINE_CHARS], len(p) > MAX_LINE_CHARS)
        if len(rest) > MAX_LINE_CHARS:
            # A line without an end: keep its head, skip the rest until a newline.
            yield (rest[:MAX_LINE_CHARS], True)
            rest = ""
    rest += dec.decode(b"", True)
    if rest:
        yield (rest[:MAX_LINE_CHARS], len(rest) > MAX_LINE_CHARS)


def parse_gc_lines(
    lines: Iterable[tuple[str, bool]] | Iterable[str],
    *,
    year: int | None = None,
    deadline: Deadline | None = None,
) -> GcLog:
    """Collections from DEBUG_STATS lines interleaved with any other (timestamped) lines."""
    year = year or datetime.now(UTC).year
    out: list[Collection] = []
    open_: list[Collection] = []  # placed after the previous stamp, awaiting the next one
    last_ts: float | None = None
    first_ts: float | None = None
    n = stamped = long_lines = dropped = 0
    current: Collection | None = None
    done: Collection | None = None  # closed without an elapsed time: the next line may say

    def keep(c: Collection, *, placed: bool = False) -> bool:
        nonlocal dropped
        if len(out) >= MAX_COLLECTIONS:
            dropped += 1
            return False
        out.append(c)
        if not placed:
            open_.append(c)
        return True

    for item in lines:
        line, cut = item if isinstance(item, tuple) else (item, False)
        n += 1
        long_lines += cut
        if deadline is not None and n % 65536 == 0:
            deadline.check()
        if done is not None:
            after, done = done, None
            alone = "elapsed" in line and "gc: done" not in line and "collecting" not in line
            if alone and (m := _ELAPSED_ONLY.search(line)) is not None:
                after.elapsed_s = float(m.group(1))
                continue
        if "GC took " in line and (m := _VLLM_GC.search(line)) is not None:
            ts = parse_timestamp(line, year)
            gc = Collection(generation=min(int(m.group(4)), 9), line=n)
            gc.elapsed_s = float(m.group(1)) / 1e3
            if m.group(2) != "?":
                gc.unreachable = int(m.group(2))
            if m.group(3):
                gc.objects = (int(m.group(3)),)
            if ts is not None:  # logged at the end: the pause ran up to this stamp
                gc.time_lo, gc.time_hi = ts - gc.elapsed_s, ts
            else:
                gc.time_lo = last_ts
            keep(gc, placed=ts is not None)
            if ts is None:
                continue
        elif "gc: " in line:
            m = _COLLECTING.search(line)
            if m:
                g = m.group(1)
                gen = int(g) if g.isdigit() else _GEN_WORDS[g]
                current = Collection(generation=min(gen, 9), line=n, time_lo=last_ts)
                if not keep(current):
                    current = None
                continue
            if current is None and (m := _DONE.search(line)) and m.group(3):
                # Its "collecting" line was cut off: the pause is known, the generation not.
                orphan = Collection(generation=UNKNOWN_GENERATION, line=n, time_lo=last_ts)
                orphan.elapsed_s = float(m.group(3))
                orphan.unreachable = int(m.group(1)) if m.group(1) else None
                orphan.uncollectable = int(m.group(2)) if m.group(2) else None
                keep(orphan)
                continue
            if current is not None:
                m = _EACH.search(line)
                if m:
                    current.objects = tuple(int(x) for x in m.group(1).split()[:8])
                    continue
                m = _DONE.search(line)
                if m:
                    if m.group(1):
                        current.unreachable = int(m.group(1))
                    if m.group(2):
                        current.uncollectable = int(m.group(2))
                    if m.group(3):
                        current.elapsed_s = float(m.group(3))
                    else:
                        done = current
                    current = None
                    continue
                if _PERMANENT.search(line):
                    continue
        ts = parse_timestamp(line, year) if line else None
        if ts is not None:
            stamped += 1
            if first_ts is None:
                first_ts = ts
            for c in open_:
                c.time_hi = ts
            open_.clear()
            last_ts = ts if last_ts is None else max(last_ts, ts)
    for c in out:
        if c.elapsed_s is None and c.time_lo is not None and c.time_hi is not None:
            c.elapsed_s = max(0.0, c.time_hi - c.time_lo)
            c.duration_estimated = True
    return GcLog(out, n, stamped, first_ts, last_ts, long_lines, dropped)


def parse_gc_log(
    source: Path | str | BinaryIO,
    limits: Limits = DEFAULT_LIMITS,
    deadline: Deadline | None = None,
    *,
    year: int | None = None,
) -> GcLog:
    """Read a (possibly gzipped) stderr/log file through the bounded reader and parse it."""
    deadline = deadline or Deadline(limits.deadline_s)
    return parse_gc_lines(_lines(stream(source, limits, deadline)), year=year, deadline=deadline)


def parse_gc_text(text: str, *, year: int | None = None) -> GcLog:
    """Parse log text already in memory (tests, small pastes)."""
    return parse_gc_lines(text.splitlines(), year=year)


# --------------------------------------------------------------------------------------
# Analysis.


_pct = percentile


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def correlate_spikes(
    collections: Sequence[Collection],
    points: Sequence[tuple[float, float]],
    *,
    threshold: float | None = None,
    slack_s: float = 1.0,
) -> dict[str, Any]:
    """How many latency spikes fall inside a collection's window.

    ``points`` are ``(unix time, latency)`` observations (ITL, step duration, ...). A spike
    is a point at or above ``threshold`` (default: 3x the median latency). A collection's
    window is ``[time_lo - slack, time_hi + pause + slack]``: log stamps have one-second
    resolution in vLLM, so the slack absorbs the rounding.
    """
    lat = [v for _t, v in points]
    if threshold is None:
        med = _pct(lat, 50)
        threshold = 3.0 * med if med else math.inf
    spikes = sorted(t for t, v in points if v >= threshold)
    windows = []
    for c in collections:
        if c.time is None:
            continue
        lo = c.time - slack_s
        hi = (c.time_hi if c.time_hi is not None else c.time) + (c.elapsed_s or 0.0) + slack_s
        windows.append((lo, hi))
    windows.sort()
    inside = 0
    j = 0
    reach = -math.inf
    for t in spikes:
        while j < len(windows) and windows[j][0] <= t:
            reach = max(reach, windows[j][1])
            j += 1
        if t <= reach:
            inside += 1
    return {
        "points": len(points),
        "threshold": threshold if math.isfinite(threshold) else None,
        "spikes": len(spikes),
        "spikes_in_pause_window": inside,
        "share_explained": round(inside / len(spikes), 4) if spikes else None,
        "slack_s": slack_s,
    }


@dataclass
class GcAnalysis:
    """Pauses by generation, rates, spike correlation, findings and signals."""

    collections: int
    by_generation: dict[str, dict[str, Any]]
    overall: dict[str, Any]
    per_minute: float | None
    log_span_s: float | None
    longest: list[dict[str, Any]]
    correlation: dict[str, Any] | None
    findings: list[dict[str, Any]]
    signals: dict[str, float]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "gc-log",
            "collections": self.collections,
            "by_generation": self.by_generation,
            "overall": self.overall,
            "per_minute": self.per_minute,
            "log_span_s": self.log_span_s,
            "longest": self.longest,
            "correlation": self.correlation,
            "findings": self.findings,
            "signals": self.signals,
            "notes": self.notes,
        }


def _stats(pauses_ms: list[float], count: int, span_min: float | None) -> dict[str, Any]:
    return {
        "count": count,
        "with_duration": len(pauses_ms),
        "p50_ms": _ms(_pct(pauses_ms, 50)),
        "p99_ms": _ms(_pct(pauses_ms, 99)),
        "max_ms": _ms(max(pauses_ms)) if pauses_ms else None,
        "total_ms": _ms(math.fsum(pauses_ms)),
        "per_minute": round(count / span_min, 3) if span_min else None,
    }


def analyse_gc_log(
    log: GcLog,
    *,
    latencies: Sequence[tuple[float, float]] | None = None,
    spike_threshold: float | None = None,
    long_pause_ms: float = LONG_PAUSE_MS,
) -> GcAnalysis:
    """Summarise pauses; ``latencies`` (unix time, latency) adds the spike correlation."""
    cols = log.collections
    span_s = (
        log.last_time - log.first_time
        if log.first_time is not None and log.last_time is not None
        else None
    )
    span_min = span_s / 60.0 if span_s and span_s > 0 else None
    gens: dict[int, list[Collection]] = {}
    for c in cols:
        gens.setdefault(c.generation, []).append(c)
    by_gen = {
        str(g): _stats(
            [c.elapsed_s * 1e3 for c in cs if c.elapsed_s is not None], len(cs), span_min
        )
        for g, cs in sorted(gens.items())
    }
    all_ms = [c.elapsed_s * 1e3 for c in cols if c.elapsed_s is not None]
    overall = _stats(all_ms, len(cols), span_min)
    overall["estimated_durations"] = sum(1 for c in cols if c.duration_estimated)
    oldest = max(gens) if gens else None
    longest = [
        c.as_dict()
        for c in sorted(
            (c for c in cols if c.elapsed_s is not None), key=lambda c: -(c.elapsed_s or 0.0)
        )[:10]
    ]
    correlation = None
    if latencies is not None:
        correlation = correlate_spikes(cols, latencies, threshold=spike_threshold)

    signals: dict[str, float] = {"artifact_gc_collections": len(cols)}
    if all_ms:
        signals["artifact_gc_pause_max_ms"] = round(max(all_ms), 3)
        signals["artifact_gc_pause_p99_ms"] = round(_pct(all_ms, 99) or 0.0, 3)
    if span_min:
        signals["artifact_gc_pauses_per_min"] = round(len(cols) / span_min, 3)
    gen2 = gens.get(2, [])
    gen2_ms = [c.elapsed_s * 1e3 for c in gen2 if c.elapsed_s is not None]
    if gen2_ms:
        signals["artifact_gc_gen2_pause_max_ms"] = round(max(gen2_ms), 3)
    if span_min and gen2:
        signals["artifact_gc_gen2_per_min"] = round(len(gen2) / span_min, 3)
    if correlation and correlation["share_explained"] is not None:
        signals["artifact_gc_spike_share"] = correlation["share_explained"]

    findings = []
    long_old = [c for c in gens.get(oldest, []) if (c.elapsed_s or 0.0) * 1e3 >= long_pause_ms]
    rate = len(long_old) / span_min if span_min else None
    frequent = len(long_old) >= MIN_LONG_PAUSES and (rate is None or rate >= MIN_LONG_PER_MIN)
    if oldest is not None and oldest >= 1 and long_old and frequent:
        old_ms = [(c.elapsed_s or 0.0) * 1e3 for c in long_old]
        values: dict[str, Any] = {
            "generation": oldest,
            "long_pauses": len(long_old),
            "long_pause_threshold_ms": long_pause_ms,
            "pause_p50_ms": _ms(_pct(old_ms, 50)),
            "pause_max_ms": _ms(max(old_ms)),
            "per_minute": round(rate, 3) if rate is not None else None,
            "estimated_durations": sum(1 for c in long_old if c.duration_estimated),
        }
        detail = (
            f"{len(long_old)} generation-{oldest} collections took >= {long_pause_ms:.0f} ms "
            f"(median {values['pause_p50_ms']:.0f} ms, max {values['pause_max_ms']:.0f} ms"
        )
        detail += f", {rate:.1f} per minute)." if rate is not None else ")."
        detail += " Each one stops the engine loop, so every running request sees it as latency."
        if correlation and correlation["share_explained"] is not None:
            values["spikes"] = correlation["spikes"]
            values["spikes_in_pause_window"] = correlation["spikes_in_pause_window"]
            values["share_of_spikes_explained"] = correlation["share_explained"]
            detail += (
                f" {correlation['spikes_in_pause_window']} of {correlation['spikes']} latency "
                "spikes fall inside a collection's window."
            )
        findings.append(
            {
                "key": "gc-pauses",
                "title": "Long garbage-collection pauses in the engine process",
                "detail": detail,
                "values": values,
            }
        )
    notes = []
    if not log.timestamped_lines:
        notes.append("no timestamped lines: collections cannot be placed in time")
    if log.long_lines:
        notes.append(f"{log.long_lines} over-long lines were cut at {MAX_LINE_CHARS} characters")
    if log.dropped_collections:
        notes.append(f"{log.dropped_collections} collections beyond {MAX_COLLECTIONS} ignored")
    return GcAnalysis(
        collections=len(cols),
        by_generation=by_gen,
        overall=overall,
        per_minute=overall["per_minute"],
        log_span_s=round(span_s, 3) if span_s is not None else None,
        longest=longest,
        correlation=correlation,
        findings=findings,
        signals=signals,
        notes=notes,
    )
