"""A static SVG line chart for the postmortem: pure, self-contained, vector.

The alarm's measurement over the investigation window, its threshold, a marker per
decision and the fix time. No scripts, no fonts or images from anywhere: the same markup
is inlined in the HTML page and drawn as vector paths in the PDF. Every piece of text is
escaped; colours are mid-tones that read on the dark page and on paper alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

Point = tuple[float, float]

WIDTH, HEIGHT = 760, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 40
MAX_POINTS = 400  # per series, after thinning to min/max pairs per column
LINE_COLOURS = ("#4d9be6", "#b083f0", "#2fa4a9", "#d17a2a")
AXIS, GRID, THRESHOLD, DECISION, FIX = "#8b949e", "#8b949e", "#e5534b", "#c69026", "#3fa34d"
FONT = 'font-family="DejaVu Sans, sans-serif" font-size="10"'


def line_chart(
    series: Sequence[Sequence[Point]],
    *,
    start: float,
    end: float,
    threshold: float | None = None,
    op: str = ">",
    markers: Sequence[Mapping] = (),
    fix_at: float | None = None,
    title: str = "",
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """The chart as an ``<svg>`` element. ``series`` are (unix seconds, value) points;
    ``markers`` are ``{"t": seconds, "label": text}``."""
    if end <= start:
        end = start + 1
    clean = [
        _thin(
            sorted((t, v) for t, v in points if math.isfinite(v) and start <= t <= end),
            MAX_POINTS,
        )
        for points in series
    ]
    values = [v for points in clean for _, v in points]
    if threshold is not None and math.isfinite(threshold):
        values.append(threshold)
    low, high = _nice_range(min(values, default=0.0), max(values, default=1.0))
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - start) / (end - start) * plot_w

    def y(v: float) -> float:
        return TOP + plot_h - (v - low) / (high - low) * plot_h

    label = escape(title or "Alarm measurement", quote=True)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" aria-label="{label}">',
        f"<title>{label}</title>",
        f'<text x="{LEFT}" y="16" fill="{AXIS}" {FONT} font-weight="bold">{label}</text>',
    ]
    for v in _ticks(low, high):
        out.append(_line(LEFT, y(v), LEFT + plot_w, y(v), GRID, 0.5, "2 3"))
        out.append(_text(LEFT - 6, y(v) + 3, _fmt(v), AXIS, anchor="end"))
    for t in _time_ticks(start, end):
        out.append(_line(x(t), TOP + plot_h, x(t), TOP + plot_h + 4, AXIS, 1))
        when = datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M")
        out.append(_text(x(t), TOP + plot_h + 16, when, AXIS, anchor="middle"))
    out.append(_text(LEFT + plot_w, height - 6, "UTC", AXIS, anchor="end"))
    out.append(_line(LEFT, TOP, LEFT, TOP + plot_h, AXIS, 1))
    out.append(_line(LEFT, TOP + plot_h, LEFT + plot_w, TOP + plot_h, AXIS, 1))
    if threshold is not None and math.isfinite(threshold):
        out.append(_line(LEFT, y(threshold), LEFT + plot_w, y(threshold), THRESHOLD, 1.5, "6 4"))
        text = f"threshold {op} {_fmt(threshold)}"
        out.append(_text(LEFT + plot_w - 4, y(threshold) - 4, text, THRESHOLD, anchor="end"))
    for i, points in enumerate(clean):
        if not points:
            continue
        d = " ".join(
            f"{'M' if j == 0 else 'L'}{x(t):.1f} {y(v):.1f}" for j, (t, v) in enumerate(points)
        )
        colour = LINE_COLOURS[i % len(LINE_COLOURS)]
        out.append(f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    for n, marker in enumerate(m for m in markers if start <= m["t"] <= end):
        mx = x(marker["t"])
        out.append(_line(mx, TOP, mx, TOP + plot_h, DECISION, 1, "3 3"))
        out.append(
            f'<path d="M{mx - 4:.1f} {TOP:.1f} L{mx + 4:.1f} {TOP:.1f} L{mx:.1f} {TOP + 6:.1f} Z" '
            f'fill="{DECISION}"><title>{escape(str(marker.get("label", "")))}</title></path>'
        )
        out.append(_text(mx + 3, TOP + 14 + 11 * (n % 4), str(n + 1), DECISION))
    if fix_at is not None and start <= fix_at <= end:
        fx = x(fix_at)
        out.append(_line(fx, TOP, fx, TOP + plot_h, FIX, 2))
        out.append(_text(fx + 3, TOP + plot_h - 6, "fix", FIX))
    if not values or not any(clean):
        out.append(
            _text(LEFT + plot_w / 2, TOP + plot_h / 2, "no stored observations", AXIS, "middle")
        )
    out.append("</svg>")
    return "".join(out)


def _line(x1, y1, x2, y2, colour: str, width: float, dash: str = "") -> str:
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<path d="M{x1:.1f} {y1:.1f} L{x2:.1f} {y2:.1f}" stroke="{colour}" '
        f'stroke-width="{width}"{dashed} fill="none"/>'
    )


def _text(x: float, y: float, text: str, colour: str, anchor: str = "start") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" fill="{colour}" text-anchor="{anchor}" {FONT}>'
        f"{escape(text)}</text>"
    )


def _thin(points: list[Point], limit: int) -> list[Point]:
    """At most ``limit`` points: the min and max of each column keep the peaks visible."""
    if len(points) <= limit:
        return points
    columns = limit // 2
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0
    buckets: dict[int, list[Point]] = {}
    for p in points:
        buckets.setdefault(min(columns - 1, int((p[0] - t0) / span * columns)), []).append(p)
    out: list[Point] = []
    for _, bucket in sorted(buckets.items()):
        lo, hi = min(bucket, key=lambda p: p[1]), max(bucket, key=lambda p: p[1])
        out.extend(sorted({lo, hi}))
    return out


def _nice_range(low: float, high: float) -> tuple[float, float]:
    low = min(low, 0.0) if low >= 0 else low
    if high <= low:
        high = low + 1.0
    step = _nice_step((high - low) / 4)
    return math.floor(low / step) * step, math.ceil(high * 1.05 / step) * step


def _nice_step(raw: float) -> float:
    exponent = math.floor(math.log10(raw)) if raw > 0 else 0
    base = 10**exponent
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * base:
            return m * base
    return 10 * base


def _ticks(low: float, high: float) -> list[float]:
    step = _nice_step((high - low) / 4)
    count = round((high - low) / step)
    return [low + i * step for i in range(count + 1)]


def _time_ticks(start: float, end: float) -> list[float]:
    span = end - start
    for step in (60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400):
        if span / step <= 8:
            break
    first = math.ceil(start / step) * step
    return [first + i * step for i in range(int((end - first) // step) + 1)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def alarm_chart(chart: Mapping) -> str:
    """The document's alarm chart (``record.chart_data``) as SVG."""
    return line_chart(
        chart["series"],
        start=chart["start"],
        end=chart["end"],
        threshold=chart["threshold"],
        op=chart["op"],
        markers=chart["markers"],
        fix_at=chart["fix_at"],
        title=chart["title"],
    )
