"""The chart is a pure function: self-contained SVG, all text escaped."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from postmortems.svg import line_chart

START = 1_767_600_000.0


def _chart(**kwargs) -> str:
    points = [(START + 15 * i, 0.35 if i < 20 or i > 60 else 1.4) for i in range(100)]
    defaults = {
        "start": START,
        "end": START + 1500,
        "threshold": 0.6,
        "markers": [{"t": START + 450, "label": "confirm kv-cache-pressure"}],
        "fix_at": START + 900,
        "title": "p95 TTFT: ttft_p95",
    }
    return line_chart([points], **{**defaults, **kwargs})


def test_it_is_well_formed_svg_with_the_threshold_the_fix_and_the_markers():
    svg = _chart()
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "threshold &gt; 0.6" in svg and ">fix<" in svg
    assert "<title>confirm kv-cache-pressure</title>" in svg
    polyline = max(re.findall(r'd="(M[^"]*)"', svg), key=len)
    assert polyline.count("L") == 99  # one segment per point


def test_text_is_escaped_and_nothing_is_referenced():
    hostile = '</text><script>alert(1)</script><image href="http://169.254.169.254/"/>'
    svg = _chart(title=hostile, markers=[{"t": START + 10, "label": hostile}])
    root = ET.fromstring(svg)  # noqa: S314 - our own output, still well-formed
    assert "<script" not in svg and "<image" not in svg
    tags = {el.tag.rpartition("}")[2] for el in root.iter()}
    assert tags <= {"svg", "title", "text", "path"}
    assert not any(name.endswith("href") for el in root.iter() for name in el.attrib)
    assert hostile in {el.text for el in root.iter()}  # shown as the text it is


def test_long_series_are_thinned_but_keep_their_peaks():
    points = [(START + i, 1.0) for i in range(10_000)]
    points[5_000] = (START + 5_000, 9.0)
    svg = line_chart([points], start=START, end=START + 10_000)
    polyline = max(re.findall(r'd="(M[^"]*)"', svg), key=len)
    assert polyline.count("L") < 500
    assert _chart_max_y(svg) is not None


def _chart_max_y(svg: str):
    # The 9.0 peak sets the axis: its tick label is drawn.
    return re.search(r">10<|>9<|>8<", svg)


def test_no_data_says_so():
    svg = line_chart([], start=START, end=START + 600, threshold=None)
    assert "no stored observations" in svg
