"""One entry point from a file to its stored analysis, whatever the kind.

The worker task, the ``analyze_artifact`` command and ``diagnose`` all come through here, so
an artifact analysed in a terminal reads exactly as it would in the console.
"""

from __future__ import annotations

import math
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from artifacts import kinds
from artifacts.bounded import DEFAULT_LIMITS, Deadline, Limits
from artifacts.errors import ArtifactRejected

SNIFF_BYTES = 64 * 1024


MAX_CHART_PAUSES = 5000
# (start, end) unix seconds -> (unix time, latency) points the deployment recorded.
Latencies = Callable[[float, float], list[tuple[float, float]]]


def _memory_snapshot(
    path: Path, limits: Limits, deadline: Deadline, latencies: Latencies | None
) -> dict:
    from artifacts.memory_analysis import analyse_snapshot
    from artifacts.memory_snapshot import load_snapshot

    return analyse_snapshot(load_snapshot(path, limits)).as_dict()


def _chrome_trace(
    path: Path, limits: Limits, deadline: Deadline, latencies: Latencies | None
) -> dict:
    from artifacts.chrome_trace import load_chrome_trace
    from artifacts.trace_analysis import analyse_trace

    return analyse_trace(load_chrome_trace(path, limits, deadline)).as_dict()


def _gc_log(path: Path, limits: Limits, deadline: Deadline, latencies: Latencies | None) -> dict:
    from artifacts.gc_log import analyse_gc_log, parse_gc_log

    log = parse_gc_log(path, limits, deadline)
    points = None
    if latencies is not None and log.first_time is not None and log.last_time is not None:
        points = latencies(log.first_time, log.last_time) or None
    out = analyse_gc_log(log, latencies=points).as_dict()
    # The newest pauses, compact, for the chart (pages never re-parse the file).
    out["pauses"] = [
        {
            "time": c.time,
            "generation": c.generation,
            "pause_ms": None if c.elapsed_s is None else round(c.elapsed_s * 1e3, 3),
        }
        for c in log.collections[-MAX_CHART_PAUSES:]
    ]
    return out


ANALYSERS: dict[str, Callable[[Path, Limits, Deadline, Latencies | None], dict]] = {
    kinds.MEMORY_SNAPSHOT: _memory_snapshot,
    kinds.CHROME_TRACE: _chrome_trace,
    kinds.GC_LOG: _gc_log,
}


def detect_kind(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError as exc:
        raise ArtifactRejected(f"cannot read the file: {exc.strerror}") from None
    if not head:
        raise ArtifactRejected("file is empty")
    kind = kinds.sniff(head)
    if kind is None:
        raise ArtifactRejected(
            "not a memory snapshot (pickle), a Chrome trace (JSON) or a gc DEBUG_STATS log"
        )
    return kind


def analyse_file(
    path: Path | str,
    kind: str | None = None,
    limits: Limits | None = None,
    *,
    latencies: Latencies | None = None,
) -> dict:
    """The analysis of one artifact as a JSON-able dict with ``kind``, ``findings`` and
    ``signals``; raises ``ArtifactRejected`` for anything it will not analyse.

    ``latencies(start, end)`` gives (unix time, latency) points the deployment recorded:
    a gc log's pauses are correlated with the spikes among them."""
    path = Path(path)
    limits = limits or DEFAULT_LIMITS
    if kind is not None and kind not in ANALYSERS:
        raise ArtifactRejected(
            f"unknown artifact kind {kind!r} (expected {', '.join(kinds.KINDS)})"
        )
    try:
        st = path.stat()
    except OSError as exc:
        raise ArtifactRejected(f"cannot read the file: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ArtifactRejected("not a regular file (a directory, a FIFO or a device)")
    size = st.st_size
    if size > limits.max_file_bytes:
        raise ArtifactRejected(f"file is larger than the {limits.max_file_bytes >> 20} MiB limit")
    kind = kind or detect_kind(path)
    deadline = Deadline(limits.deadline_s)
    try:
        analysis = ANALYSERS[kind](path, limits, deadline, latencies)
    except ArtifactRejected:
        raise
    except (MemoryError, RecursionError):
        raise ArtifactRejected(f"the {kind} is too large or too deeply nested to analyse") from None
    analysis["kind"] = kind
    analysis["signals"] = clean_signals(analysis.get("signals", {}))
    return _sanitise(analysis)


def clean_signals(signals: dict[str, Any]) -> dict[str, float]:
    """Only finite numbers named ``artifact_*`` become evidence."""
    out = {}
    for name, value in signals.items():
        if not str(name).startswith("artifact_") or isinstance(value, bool):
            continue
        if isinstance(value, int | float) and math.isfinite(value):
            out[str(name)] = float(value)
    return out


def _sanitise(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become null (JSON has no NaN), tuples lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _sanitise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_sanitise(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "as_dict"):
        return _sanitise(value.as_dict())
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
