"""Signal values in the units a person reads: GiB, ms, %, counts.

Artifact signals carry their unit in their name (``artifact_reserved_bytes``,
``artifact_trace_span_s``, ``artifact_leak_fraction``), so the suffix picks the format. The
table is ordered longest suffix first: ``_bytes_per_s`` must win over ``_s``."""

from __future__ import annotations

from collections.abc import Callable

_BINARY = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def bytes_text(n: float) -> str:
    """``54597900000`` -> ``50.85 GiB``; small values stay in bytes."""
    for unit, size in _BINARY:
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def _seconds(v: float) -> str:
    if abs(v) < 1:
        return f"{v * 1e3:.1f} ms"
    return f"{v:.2f} s"


def _count(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


SUFFIXES: tuple[tuple[str, Callable[[float], str]], ...] = (
    ("_bytes_per_s", lambda v: f"{bytes_text(v)}/s"),
    ("_bytes", bytes_text),
    ("_fraction", lambda v: f"{v * 100:.1f} %"),
    ("_pct", lambda v: f"{v:.1f} %"),
    ("_ms", lambda v: f"{v:.1f} ms"),
    ("_us", lambda v: f"{v:.0f} us"),
    ("_s", _seconds),
)


def signal_text(name: str, value: float | int | None) -> str:
    """The value of signal ``name`` with its unit; counts and unknown suffixes as plain
    numbers with thousands separators (never ``5.4e+10``)."""
    if value is None:
        return "no data"
    for suffix, fmt in SUFFIXES:
        if name.endswith(suffix):
            return fmt(float(value))
    return _count(float(value))
