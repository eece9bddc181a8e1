"""Plotly figures from a stored analysis (never from the file): what each kind is read by.

Memory snapshots: reserved vs allocated over time (and graph pools), the step increases
marked. Chrome traces: per-step duration coloured by new prefill tokens. gc logs: pauses
by generation. Figures are plain dicts; ``static/js/charts.js`` draws them.

Every string in a figure here is fixed text or came from the file (step, device, pool and
generation names), so the whole figure goes through ``audit.text.plain_figure`` before it
leaves: plotly.js would render markup in any of them (a step name as a link, issue 19.8).
"""

from __future__ import annotations

from typing import Any

from audit.text import plain_figure

GIB = float(1 << 30)


def figure_json(analysis: dict[str, Any] | None) -> dict | None:
    if not analysis:
        return None
    builder = {
        "memory-snapshot": _memory,
        "chrome-trace": _trace,
        "gc-log": _gc,
    }.get(analysis.get("kind", ""))
    chart = builder(analysis) if builder else None
    return plain_figure(chart) if chart else None


def _memory(analysis: dict) -> dict | None:
    timelines = analysis.get("timeline") or {}
    data = []
    for device, curve in sorted(timelines.items()):
        x = curve.get("x") or []
        if not x:
            continue
        # time_us since the epoch when the snapshot has it, else the event index.
        timed = x[0] > 1e12
        xs = [(v - x[0]) / 1e6 for v in x] if timed else x
        prefix = f"GPU {device} " if len(timelines) > 1 else ""
        series = [("reserved", curve.get("reserved")), ("allocated", curve.get("allocated"))]
        series += [(f"graph pool {p}", v) for p, v in (curve.get("pools") or {}).items()]
        for name, values in series:
            if values:
                data.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "name": prefix + name,
                        "x": xs,
                        "y": [v / GIB if v is not None else None for v in values],
                        "line": {"shape": "hv"},
                    }
                )
        axis = "seconds into the recorded history" if timed else "allocator event"
    if not data:
        return None
    return {
        "title": "Reserved and allocated memory over the recorded history",
        "figure": {
            "data": data,
            "layout": {"xaxis": {"title": axis}, "yaxis": {"title": "GiB"}, "height": 360},
        },
    }


def _trace(analysis: dict) -> dict | None:
    steps = analysis.get("steps") or []
    if not steps:
        return None
    names = [str(s.get("name", i)) for i, s in enumerate(steps)]
    durations = [s.get("dur_ms") for s in steps]
    tokens = [((s.get("composition") or {}).get("prefill_tokens") or 0) for s in steps]
    return {
        "title": "Engine steps: duration, coloured by new prefill tokens",
        "figure": {
            "data": [
                {
                    "type": "bar",
                    "name": "step duration",
                    "x": names,
                    "y": durations,
                    "marker": {"color": tokens, "colorscale": "Viridis", "showscale": True},
                    "hovertemplate": "%{x}: %{y:.1f} ms<extra></extra>",
                }
            ],
            "layout": {"yaxis": {"title": "ms"}, "height": 360},
        },
    }


def _gc(analysis: dict) -> dict | None:
    pauses = [p for p in analysis.get("pauses") or [] if p.get("pause_ms") is not None]
    if not pauses:
        return None
    data = []
    for generation in sorted({p.get("generation") for p in pauses}, key=str):
        mine = [p for p in pauses if p.get("generation") == generation]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"generation {generation}",
                "x": [
                    p.get("time") if p.get("time") is not None else i for i, p in enumerate(mine)
                ],
                "y": [p.get("pause_ms") for p in mine],
            }
        )
    return {
        "title": "Garbage-collection pauses",
        "figure": {"data": data, "layout": {"yaxis": {"title": "ms"}, "height": 320}},
    }
