"""Evidence charts are plotly figures built by pure functions: the signal as its threshold
reads it, thresholds as lines, the record's moments as marks, never over the point budget."""

from __future__ import annotations

import json
import math

import pytest

from investigations.charts import (
    MAX_POINTS,
    MAX_TRACES,
    Mark,
    Threshold,
    figure,
    matching,
    rolling_increase,
    rolling_sum,
    spread,
)
from investigations.playbook import Measure

ITL = Measure("itl_p99", "engine", "max", 300)


def _shapes(fig, axis):
    """Horizontal (threshold) or vertical (mark) lines of a figure."""
    ref = "paper" if axis == "h" else "x"
    return [s for s in fig["figure"]["layout"]["shapes"] if s["xref"] == ref]


def _texts(fig):
    return [a["text"] for a in fig["figure"]["layout"]["annotations"]]


def test_rolling_quantities_read_what_the_check_reads_at_each_sample():
    points = [(float(t), 1.0) for t in range(0, 100, 10)]
    assert [v for _, v in rolling_sum(points, 30)] == [1, 2, 3, 3, 3, 3, 3, 3, 3, 3]
    counter = [(float(t), float(t * 2)) for t in range(0, 100, 10)]
    # Until the samples cover a quarter of the window there is no increase to report; then
    # it is last minus first inside (t - 40, t].
    increase = rolling_increase(counter, 40)
    assert increase[:5] == [(10, 20), (20, 40), (30, 60), (40, 60), (50, 60)]
    clocks = [[(0.0, 1410.0), (5.0, 1410.0)], [(0.0, 1200.0), (5.0, 1410.0)], [(7.0, 1.0)]]
    assert spread(clocks) == [(0.0, pytest.approx(1410 / 1200 - 1)), (5.0, 0.0)]


def test_a_long_signal_is_cut_to_the_point_budget_and_keeps_its_spike():
    points = [(float(t), 0.05) for t in range(100_000)]
    points[61_234] = (61_234.0, 0.3)  # one 300 ms step
    fig = figure(ITL, [("target=ab12", points)], start=0, end=100_000)
    (trace,) = fig["figure"]["data"]
    assert fig["points"] == len(trace["x"]) <= MAX_POINTS
    assert max(trace["y"]) == 0.3 and 61_234_000 in trace["x"]
    assert trace["name"] == "itl_p99"  # one target: the signal's name, not the target id


def test_many_series_share_the_budget_and_the_caption_says_what_was_left_out():
    series = [
        (f"target=ab12,gpu={i}", [(float(t), i + t % 7) for t in range(5000)]) for i in range(20)
    ]
    clock = Measure("gpu_sm_clock_mhz", "dcgm", "min", 300)
    fig = figure(clock, series, start=0, end=5000)
    assert len(fig["figure"]["data"]) == MAX_TRACES
    assert fig["points"] <= MAX_POINTS
    assert "4 more series not drawn" in fig["caption"]


def test_thresholds_and_marks_are_drawn_with_the_nodes_own_decisions_labelled():
    points = [(float(t), 0.1) for t in range(1000, 2000, 15)]
    marks = [
        Mark(1100, "alarm firing", "alarm"),
        Mark(1200, "eliminate gpu-throttling", "decision", "gpu-throttling"),
        Mark(1300, "confirm oversized-prefill-chunks", "decision", "oversized-prefill-chunks"),
        Mark(1400, "fix strict-chunk-budget", "fix"),
        Mark(5000, "after the window", "fix"),
    ]
    fig = figure(
        ITL,
        [("", points)],
        start=1000,
        end=2000,
        thresholds=[Threshold("confirm", ">", 0.15), Threshold("eliminate", "<=", 0.06),
                    Threshold("confirm", ">", None)],
        marks=marks,
        node="oversized-prefill-chunks",
    )  # fmt: skip
    assert [s["y0"] for s in _shapes(fig, "h")] == [0.15, 0.06]
    assert [s["x0"] for s in _shapes(fig, "v")] == [1_100_000, 1_200_000, 1_300_000, 1_400_000]
    texts = _texts(fig)
    assert "confirm > 0.15 s" in texts and "eliminate <= 0.06 s" in texts  # ITL is in seconds
    assert "alarm firing" in texts and "fix strict-chunk-budget" in texts
    assert "confirm oversized-prefill-chunks" in texts
    assert "eliminate gpu-throttling" not in texts  # another node's decision: a faint line
    layout = fig["figure"]["layout"]
    assert layout["xaxis"]["range"] == [1_000_000, 2_000_000]
    assert layout["paper_bgcolor"] == "rgba(0,0,0,0)" and layout["font"]["color"] == "#e6e9ee"


def test_a_spread_check_is_drawn_as_the_spread_its_threshold_compares():
    ranks = [
        (f"target=ab12,gpu={g}", [(float(t), 1410.0 - 200 * (g == 3)) for t in range(0, 600, 15)])
        for g in range(4)
    ]
    measure = Measure("gpu_sm_clock_mhz", "dcgm", "spread", 300)
    fig = figure(measure, ranks, start=0, end=600, thresholds=[Threshold("confirm", ">", 0.05)])
    (trace,) = fig["figure"]["data"]
    assert trace["name"] == "spread" and trace["y"][0] == pytest.approx(1410 / 1210 - 1)
    assert "spread across series" in fig["caption"]


def test_matching_follows_evaluations_label_rule():
    observations = {
        ("log", "log_events"): [
            ("target=a,kind=cuda_oom", [(1.0, 1.0)]),
            ("target=a,kind=other", [(1.0, 5.0)]),
        ]
    }
    oom = Measure("log_events", "log", "sum", 300, {"kind": "cuda_oom"})
    assert matching(oom, observations) == [("target=a,kind=cuda_oom", [(1.0, 1.0)])]
    assert matching(ITL, observations) == []


def test_hostile_values_and_labels_never_reach_the_chart_as_markup_or_invalid_json():
    points = [(1.0, math.nan), (2.0, math.inf), (3.0, 0.2), (4.0, -math.inf)]
    label = 'target=a,model=<a href="javascript:alert(1)">x</a>'
    fig = figure(
        ITL, [(label, points), ("target=b", [(3.0, 0.1)])], start=0, end=10,
        marks=[Mark(2, "<img src=x onerror=alert(1)>", "alarm")],
    )  # fmt: skip
    json.dumps(fig["figure"], allow_nan=False)  # valid JSON for json_script and JSON.parse
    shown = [t["name"] for t in fig["figure"]["data"]] + _texts(fig)
    assert shown and not any("<" in text or ">" in text for text in shown)
    assert fig["figure"]["data"][0]["y"] == [0.2]


def test_axes_thresholds_and_hover_carry_the_signals_unit():
    fig = figure(ITL, [("target=ab12", [(0, 0.05), (10, 0.2)])], start=0, end=10)
    layout = fig["figure"]["layout"]
    assert layout["yaxis"]["title"]["text"] == "s"
    assert fig["figure"]["data"][0]["hovertemplate"].startswith("%{y:.4g} s")
    kv = Measure("kv_cache_usage", "engine", "max", 300)
    fig = figure(
        kv, [("t", [(0, 0.5), (10, 0.97)])], start=0, end=10,
        thresholds=[Threshold("confirm", ">", 0.9)],
    )  # fmt: skip
    layout = fig["figure"]["layout"]
    assert layout["yaxis"]["tickformat"] == ".0%" and layout["yaxis"]["title"]["text"] == ""
    assert _texts(fig) == ["confirm > 90 %"]
    clocks = Measure("gpu_sm_clock_mhz", "dcgm", "spread", 300)
    assert figure(clocks, [], start=0, end=10)["figure"]["layout"]["yaxis"]["title"]["text"] == (
        "MHz"
    )


def test_equal_confirm_and_eliminate_thresholds_label_on_opposite_sides_of_the_line():
    fig = figure(
        ITL, [("t", [(0, 0.1)])], start=0, end=10,
        thresholds=[Threshold("confirm", ">", 0.1), Threshold("eliminate", "<=", 0.1)],
    )  # fmt: skip
    anchors = {a["text"]: a["yanchor"] for a in fig["figure"]["layout"]["annotations"]}
    assert anchors == {"confirm > 0.1 s": "bottom", "eliminate <= 0.1 s": "top"}


def test_marks_close_in_time_are_labelled_on_separate_rows():
    marks = [
        Mark(100.0, "confirm a", "decision", "a"),
        Mark(110.0, "eliminate b", "decision", "a"),
        Mark(120.0, "fix c", "fix", "a"),
        Mark(900.0, "confirm d", "decision", "a"),
    ]
    fig = figure(ITL, [], start=0, end=1000, marks=marks, node="a")
    shifts = {a["text"]: a["yshift"] for a in fig["figure"]["layout"]["annotations"]}
    assert shifts == {"confirm a": 0, "eliminate b": 13, "fix c": 26, "confirm d": 0}
    assert fig["figure"]["layout"]["margin"]["t"] == 26 + 2 * 13  # room for three rows
