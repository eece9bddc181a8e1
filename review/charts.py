"""The statistics page's weekly trends as plotly figures: pure functions of
``stats.Week`` rows. The page embeds each figure as JSON and static/js/charts.js draws it
(no inline script: the CSP allows none)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from review.stats import SEVERITY_ORDER, Week

SEVERITY_COLOURS = {
    "sev1": "#f85149",
    "sev2": "#ffa657",
    "sev3": "#d29922",
    "sev4": "#6cb6ff",
    "": "#9aa4b2",
}
PALETTE = ("#6cb6ff", "#d2a8ff", "#56d4dd", "#ffa657", "#7ee787", "#ff7b72", "#e3b341", "#a5d6ff")
HEIGHT = 260


def _x(weeks: Sequence[Week]) -> list[str]:
    return [w.start.isoformat() for w in weeks]


def _layout(y_title: str, *, stacked: bool) -> dict:
    layout = {
        "height": HEIGHT,
        "xaxis": {"title": {"text": "week (Monday, UTC)"}, "type": "date", "gridcolor": "#2b323c"},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero", "gridcolor": "#2b323c"},
        "uirevision": "stats",
    }
    if stacked:
        layout["barmode"] = "stack"
    return layout


def _stacked(weeks: Sequence[Week], keys: Sequence[str], counts, name, colour) -> dict:
    return {
        "data": [
            {
                "type": "bar",
                "name": name(key),
                "x": _x(weeks),
                "y": [counts(w).get(key, 0) for w in weeks],
                "marker": {"color": colour(i, key)},
            }
            for i, key in enumerate(keys)
        ],
        "layout": _layout("investigations", stacked=True),
    }


def by_severity(weeks: Sequence[Week], label: Callable[[str], str]) -> dict:
    seen = {key for w in weeks for key in w.by_severity}
    keys = [k for k in SEVERITY_ORDER if k in seen] + sorted(seen - set(SEVERITY_ORDER))
    return _stacked(
        weeks,
        keys,
        lambda w: w.by_severity,
        label,
        lambda i, key: SEVERITY_COLOURS.get(key, PALETTE[i % len(PALETTE)]),
    )


def by_root_cause(weeks: Sequence[Week]) -> dict:
    totals: dict[str, int] = {}
    for w in weeks:
        for key, n in w.by_root_cause.items():
            totals[key] = totals.get(key, 0) + n
    keys = sorted(totals, key=lambda k: (-totals[k], k == "", k))
    return _stacked(
        weeks,
        keys,
        lambda w: w.by_root_cause,
        lambda key: key or "none recorded",
        lambda i, key: PALETTE[i % len(PALETTE)] if key else "#9aa4b2",
    )


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60, 2)


def durations(weeks: Sequence[Week]) -> dict:
    lines = [
        ("Time to acknowledge", lambda w: w.median_acknowledge_s),
        ("Time to root cause", lambda w: w.median_root_cause_s),
        ("Time to verified fix", lambda w: w.median_verified_fix_s),
    ]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": name,
                "x": _x(weeks),
                "y": [_minutes(value(w)) for w in weeks],
                "connectgaps": False,
                "line": {"color": PALETTE[i]},
            }
            for i, (name, value) in enumerate(lines)
        ],
        "layout": _layout("median, minutes", stacked=False),
    }
