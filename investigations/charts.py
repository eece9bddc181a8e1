"""Evidence charts for the investigation page: plotly figures from stored series and the
record's marks (the alarm's onset, decisions, the fix). Pure functions; the view reads rows.

A check is drawn as the quantity its threshold is compared with. For ``last``, ``max``,
``min`` and ``mean`` that is the raw samples (a sample over the line is a window over the
line); for ``sum``, ``increase`` and ``spread`` it is the rolling quantity, because a
per-GPU clock is not a spread and a counter is not an increase, and a threshold drawn
over the wrong quantity tells a commander something false.

Every chart is cut to at most ``MAX_POINTS`` with the M4 reduction of probes.series (each
bucket keeps its first, lowest, highest and last point), so a single 300 ms spike survives
and a week-long investigation ships the same bytes as a ten-minute one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from audit.text import plain
from investigations.playbook import Measure
from probes.series import downsample
from probes.vocabulary import unit_of, with_unit

Point = tuple[float, float]
Series = tuple[str, Sequence[Point]]  # (labels text, points sorted by time)

MAX_POINTS = 1000
MAX_TRACES = 16  # a chart with more lines than this is unreadable; the caption says so
HEIGHT = 230
MARK_LABEL_SPAN = 0.12  # labels nearer than this share of the x range take another row
MARK_LABEL_ROWS = 3
MARK_LABEL_ROW_PX = 13

# The dark theme of static/css/atlas.css, so charts read like the rest of the page.
THEME = {
    "text": "#e6e9ee",
    "muted": "#9aa4b2",
    "line": "#2b323c",
    "accent": "#6cb6ff",
    "ok": "#3fb950",
    "warn": "#d29922",
    "bad": "#f85149",
    "focus": "#ffd33d",
}
PALETTE = (
    "#6cb6ff", "#d2a8ff", "#56d4dd", "#ffa657", "#7ee787", "#ff7b72", "#e3b341", "#a5d6ff",
)  # fmt: skip
MARK_STYLE = {
    # kind -> (colour, dash, width, labelled)
    "alarm": (THEME["bad"], "solid", 2, True),
    "decision": (THEME["accent"], "solid", 2, True),  # a decision on this chart's node
    "other-decision": (THEME["muted"], "dot", 1, False),  # on another node: context only
    "fix": (THEME["ok"], "solid", 2, True),
}


@dataclass(frozen=True)
class Mark:
    """A moment drawn as a vertical line: the alarm's onset, a decision, the fix."""

    t: float
    label: str
    kind: str  # alarm | decision | fix
    node: str = ""


@dataclass(frozen=True)
class Threshold:
    label: str  # "confirm" | "eliminate" | "alarm"
    op: str
    value: float | None


def _labels(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def matching(measure: Measure, observations: Mapping) -> list[Series]:
    """The series a measure reads, by evaluation's rule (investigations.evaluation.select):
    its label filter, and the unlabelled aggregate over per-rank series when there is one."""
    series = observations.get((measure.source, measure.signal), ())
    wanted = measure.labels.items()
    found = [(labels, points) for labels, points in series if wanted <= _labels(labels).items()]
    if not measure.labels and any(labels == "" for labels, _ in found):
        found = [(labels, points) for labels, points in found if labels == ""]
    return found


def rolling_sum(points: Sequence[Point], window: float) -> list[Point]:
    """At each sample, the sum over ``(t - window, t]``: what a ``sum`` check reads then."""
    out: list[Point] = []
    total, lo = 0.0, 0
    for t, v in points:
        total += v
        while points[lo][0] <= t - window:
            total -= points[lo][1]
            lo += 1
        out.append((t, total))
    return out


def rolling_increase(points: Sequence[Point], window: float) -> list[Point]:
    """At each sample, last minus first over ``(t - window, t]``, where the samples cover
    at least a quarter of the window (as ``increase`` in evaluation demands)."""
    out: list[Point] = []
    lo = 0
    for t, v in points:
        while points[lo][0] <= t - window:
            lo += 1
        if t - points[lo][0] >= window / 4:
            out.append((t, v - points[lo][1]))
    return out


def spread(series: Sequence[Sequence[Point]]) -> list[Point]:
    """At each sample time seen in two or more series, max / min - 1 across them."""
    by_time: dict[float, list[float]] = defaultdict(list)
    for points in series:
        for t, v in points:
            by_time[t].append(v)
    return [
        (t, max(vs) / min(vs) - 1)
        for t, vs in sorted(by_time.items())
        if len(vs) >= 2 and min(vs) > 0
    ]


def derived(measure: Measure, series: Sequence[Series]) -> tuple[list[Series], str]:
    """The lines to draw for a measure, and what they are (for the caption)."""
    window = measure.window_s
    match measure.reduce:
        case "sum":
            return [(n, rolling_sum(p, window)) for n, p in series], f"sum over {window} s"
        case "increase":
            lines = [(n, rolling_increase(p, window)) for n, p in series]
            return lines, f"increase over {window} s"
        case "spread":
            return [("spread", spread([p for _, p in series]))], "spread across series"
        case _:
            return [(n, list(p)) for n, p in series], f"samples ({measure.reduce} over {window} s)"


def _trace_name(labels: str, signal: str, many_targets: bool) -> str:
    parts = [p for p in labels.split(",") if p and (many_targets or not p.startswith("target="))]
    return ",".join(parts) or signal


@dataclass(frozen=True)
class Traces:
    """The drawn lines of one measure over one window: what every chart of that measure
    shares, whatever its thresholds and marks (50 hypotheses read ~35 signals)."""

    data: list[dict]
    points: int  # points drawn, after downsampling
    what: str  # what the lines are, for the caption
    left_out: int  # series not drawn (over MAX_TRACES)


def traces(
    measure: Measure,
    series: Sequence[Series],
    *,
    start: float,
    end: float,
    max_points: int = MAX_POINTS,
) -> Traces:
    """The plotly traces of ``series`` (everything stored over ``[start, end]``) as
    ``measure`` reads them: its reduction drawn as a rolling line, downsampled."""
    unit = unit_of(measure.signal)
    hover_value = "%{y:.1%}" if unit == "fraction" else f"%{{y:.4g}} {unit}".rstrip()
    series = [(n, [p for p in points if math.isfinite(p[1])]) for n, points in series]
    lines, what = derived(measure, series)  # before clipping: rolling values need a lead-in
    lines = [(name, [p for p in points if start <= p[0] <= end]) for name, points in lines]
    lines = [(name, points) for name, points in lines if points]
    left_out = max(0, len(lines) - MAX_TRACES)
    lines = lines[:MAX_TRACES]
    per_trace = max(4, (max_points // max(1, len(lines))) // 4 * 4)
    targets = {_labels(name).get("target") for name, _ in lines}
    data = []
    drawn = 0
    for i, (name, points) in enumerate(lines):
        kept = downsample(points, per_trace)
        drawn += len(kept)
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers" if len(kept) <= 40 else "lines",
                # Label values come from scraped endpoints: plain, like every string
                # from outside that reaches a chart (audit.text.plain, issue 19.8).
                "name": plain(_trace_name(name, measure.signal, len(targets) > 1), 80),
                "x": [round(t * 1000) for t, _ in kept],
                "y": [v for _, v in kept],
                "line": {"color": PALETTE[i % len(PALETTE)], "width": 1.5},
                "marker": {"size": 4},
                "hovertemplate": hover_value + "<extra>%{fullData.name}</extra>",
            }
        )
    return Traces(data, drawn, what, left_out)


def figure(
    measure: Measure,
    series: Sequence[Series],
    *,
    start: float,
    end: float,
    thresholds: Iterable[Threshold] = (),
    marks: Iterable[Mark] = (),
    node: str = "",
    max_points: int = MAX_POINTS,
    drawn: Traces | None = None,
) -> dict:
    """One evidence chart: ``{"figure": plotly dict, "caption": str, "points": int}``.

    ``series`` are everything stored over ``[start, end]`` (already windowed); ``node``
    is the hypothesis the chart belongs to, so its own decisions are labelled and other
    nodes' decisions are faint context. ``drawn``: the measure's :func:`traces` over the
    same window where the caller already has them (then ``series`` is not read).
    """
    signal = measure.signal
    unit = unit_of(signal)
    if drawn is None:
        drawn = traces(measure, series, start=start, end=end, max_points=max_points)
    data = drawn.data
    shapes: list[dict] = []
    annotations: list[dict] = []
    for threshold in thresholds:
        if threshold.value is None:
            continue
        colour = THEME["ok"] if threshold.label == "eliminate" else THEME["bad"]
        shapes.append(
            {
                "type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
                "y0": threshold.value, "y1": threshold.value,
                "line": {"color": colour, "width": 1.5, "dash": "dash"},
            }
        )  # fmt: skip
        annotations.append(
            {
                "xref": "paper", "x": 0, "xanchor": "left", "yref": "y", "y": threshold.value,
                # confirm above its line, eliminate below: equal thresholds stay readable
                "yanchor": "top" if threshold.label == "eliminate" else "bottom",
                "showarrow": False,
                "text": f"{threshold.label} {threshold.op} {with_unit(threshold.value, signal)}",
                "font": {"color": colour, "size": 11},
            }
        )  # fmt: skip
    # Labels of marks close in time go on successive rows above the plot, so two
    # decisions a minute apart do not print on top of each other.
    row_end: list[float] = []
    min_gap = max(1.0, (end - start) * MARK_LABEL_SPAN)
    for mark in sorted(marks, key=lambda m: m.t):
        if not start <= mark.t <= end:
            continue
        kind = "other-decision" if mark.kind == "decision" and mark.node != node else mark.kind
        colour, dash, width, labelled = MARK_STYLE[kind]
        x = round(mark.t * 1000)
        shapes.append(
            {
                "type": "line", "xref": "x", "x0": x, "x1": x, "yref": "paper", "y0": 0, "y1": 1,
                "line": {"color": colour, "width": width, "dash": dash},
            }
        )  # fmt: skip
        if labelled or not node:
            row = next((r for r, t in enumerate(row_end) if mark.t - t >= min_gap), None)
            if row is None:
                row = min(len(row_end), MARK_LABEL_ROWS - 1)
                if row == len(row_end):
                    row_end.append(mark.t)
            row_end[row] = mark.t
            annotations.append(
                {
                    "xref": "x", "x": x, "yref": "paper", "y": 1, "yanchor": "bottom",
                    "yshift": row * MARK_LABEL_ROW_PX,
                    "showarrow": False, "text": plain(mark.label, 40),
                    "font": {"color": colour, "size": 10},
                }
            )  # fmt: skip
    axis = {
        "gridcolor": THEME["line"],
        "linecolor": THEME["line"],
        "zerolinecolor": THEME["line"],
        "tickfont": {"color": THEME["muted"]},
    }
    top = 26 + MARK_LABEL_ROW_PX * max(0, len(row_end) - 1)
    axis_title = "" if unit == "fraction" else unit  # fractions get % ticks instead
    layout = {
        "height": HEIGHT,
        "margin": {"l": 56, "r": 12, "t": top, "b": 32},
        "showlegend": len(data) > 1,
        "legend": {"orientation": "h", "font": {"color": THEME["muted"], "size": 10}},
        "font": {"color": THEME["text"], "size": 11},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "xaxis": {**axis, "type": "date", "range": [round(start * 1000), round(end * 1000)]},
        "yaxis": {
            **axis,
            "rangemode": "tozero" if measure.reduce != "spread" else "normal",
            "title": {"text": axis_title, "font": {"color": THEME["muted"], "size": 10}},
            **({"tickformat": ".0%"} if unit == "fraction" else {}),
        },
        "shapes": shapes,
        "annotations": annotations,
        "hovermode": "x unified",
        # Plotly.react keeps what the reader zoomed to across refreshes while this holds.
        "uirevision": measure.signal,
    }
    caption = f"{measure.source} {measure.signal}: {drawn.what}"
    if drawn.left_out:
        caption += f"; {drawn.left_out} more series not drawn"
    return {"figure": {"data": data, "layout": layout}, "caption": caption, "points": drawn.points}
