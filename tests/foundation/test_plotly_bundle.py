"""The vendored plotly.js bundle is the pinned file, and it can draw every chart Atlas builds.

The site serves plotly.js's cartesian partial bundle (issue 17: the full bundle's parse was
most of the investigation page's first load). A partial bundle draws nothing for a trace
type it lacks, silently, so every trace type the product's figure builders emit is checked
against the types the served file registers: by building each builder's figures, and by
reading every trace-shaped dict literal in the product's source (a new builder included).
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from artifacts.charts import figure_json
from atlas_console.plotly_bundle import (
    PIN,
    PLOTLY_DIR,
    PLOTLY_FILE,
    bundle_trace_types,
    bundle_version,
)
from investigations.charts import Mark, Threshold, figure
from investigations.playbook import Measure

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [
    p
    for p in ROOT.rglob("*.py")
    if not p.relative_to(ROOT).parts[0].startswith((".", "tests", "bench", "docs"))
    and "migrations" not in p.parts
]


def _source() -> str:
    return (PLOTLY_DIR / PLOTLY_FILE).read_text(encoding="utf-8")


def test_the_vendored_file_is_the_pinned_release_byte_for_byte():
    data = (PLOTLY_DIR / PLOTLY_FILE).read_bytes()
    assert hashlib.sha256(data).hexdigest() == PIN["sha256"]
    assert bundle_version(_source()) == PIN["version"]
    assert bundle_trace_types(_source()) == frozenset(PIN["traces"])
    notes = (PLOTLY_DIR / "README.md").read_text(encoding="utf-8")
    assert f"`{PIN['package']}` **{PIN['version']}**" in notes
    assert PIN["sha256"] in notes
    assert "MIT" in (PLOTLY_DIR / "LICENSE").read_text(encoding="utf-8")


def _types(fig: dict) -> set[str]:
    # plotly's default trace type is scatter.
    return {trace.get("type", "scatter") for trace in fig["data"]}


def test_every_trace_type_the_figure_builders_emit_is_in_the_bundle():
    emitted: set[str] = set()
    points = [(float(t), 0.1 * t) for t in range(0, 600, 5)]
    evidence = figure(
        Measure("itl_p99", "engine", "max", 300),
        [("target=a", points), ("target=b", points)],
        start=0,
        end=600,
        thresholds=[Threshold("confirm", ">", 20.0)],
        marks=[Mark(300.0, "confirmed", "decision")],
    )
    emitted |= _types(evidence["figure"])
    analyses = [
        {
            "kind": "memory-snapshot",
            "timeline": {"0": {"x": [1, 2, 3], "reserved": [1, 2, 3], "allocated": [1, 1, 2]}},
        },
        {
            "kind": "chrome-trace",
            "steps": [{"name": "step 1", "dur_ms": 3.0, "composition": {"prefill_tokens": 8}}],
        },
        {"kind": "gc-log", "pauses": [{"generation": 0, "pause_ms": 1.5, "time": 3.0}]},
    ]
    for analysis in analyses:
        chart = figure_json(analysis)
        assert chart is not None, analysis["kind"]
        emitted |= _types(chart["figure"])
    assert emitted == {"scatter", "bar"}
    assert emitted <= bundle_trace_types(_source())


def _literal_trace_types() -> dict[str, list[str]]:
    """``"type": "<name>"`` of every dict literal in the product that carries data as a
    trace does (``x``, ``y`` or ``values``), by file; shapes (``x0``) and axes do not."""
    found: dict[str, list[str]] = {}
    for path in PRODUCT:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Dict):
                continue
            keys = {
                k.value: v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
            kind = keys.get("type")
            if (
                isinstance(kind, ast.Constant)
                and isinstance(kind.value, str)
                and keys.keys() & {"x", "y", "values"}
            ):
                found.setdefault(kind.value, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_trace_type_written_in_the_product_source_is_in_the_bundle():
    found = _literal_trace_types()
    assert {"scatter", "bar"} <= found.keys()  # the scan sees the builders above
    missing = {k: v for k, v in found.items() if k not in bundle_trace_types(_source())}
    assert not missing, f"trace types the vendored plotly.js cannot draw: {missing}"


def test_every_page_loads_the_vendored_bundle_through_charts_js():
    """A template that names another plotly file (the wheel's full plotly.min.js, gone
    from static/) renders charts nowhere: pages hand charts.js the vendored bundle."""
    root = Path(__file__).resolve().parents[2]
    named = {
        str(path.relative_to(root))
        for path in root.glob("*/templates/**/*.html")
        if "plotly" in path.read_text()
    }
    for name in named:
        text = (root / name).read_text()
        assert "plotly.min.js" not in text, name
        assert "vendor/plotly/plotly-cartesian.min.js" in text, name


def test_the_chart_config_points_no_plotly_default_off_the_origin():
    """The vendored plotly.js names its own hosts in defaults (topojson CDN, chart cloud);
    charts.js overrides each, so no setting could send a request off the console's origin."""
    charts = (Path(__file__).resolve().parents[2] / "static" / "js" / "charts.js").read_text()
    config = charts[charts.index("var CONFIG = {") : charts.index("};", charts.index("var CONFIG"))]
    assert "http" not in config
    for setting in ('plotlyServerURL: ""', 'topojsonURL: "/static/', "showSendToCloud: false"):
        assert setting in config
