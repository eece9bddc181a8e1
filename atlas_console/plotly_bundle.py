"""plotly.js as the site serves it: a vendored partial bundle at a pinned version.

The investigation page's first load was spent parsing the full 4.8 MB plotly.min.js from
the plotly wheel (issue 17: ~2.5 s of a 4 s load). Every figure Atlas builds is cartesian
(scatter and bar traces), so the site serves plotly.js's own cartesian bundle of the same
release, 1.5 MB, vendored from npm (``plotly.js-cartesian-dist-min``) under
``static/vendor/plotly/`` with its licence. No CDN is ever involved: the two defaults that
name plotly's hosts (``topojsonURL``, the geo maps' CDN; ``plotlyServerURL``, the chart
cloud) are rewritten in the vendored file to point home / nowhere, so even an unset config
makes no request off the origin (``PUBLISHED_SHA256`` is the file as published).

``PIN`` records what was vendored; ``tests/foundation/test_plotly_bundle.py`` checks the
file against it and every trace type the figure builders emit against the bundle. The CSP
reads plotly's inline-style hashes from this same file (``atlas_console.security``).
"""

from __future__ import annotations

import re
from pathlib import Path

PLOTLY_DIR = Path(__file__).resolve().parent.parent / "static" / "vendor" / "plotly"
PLOTLY_FILE = "plotly-cartesian.min.js"
PUBLIC_PATH = "vendor/plotly/plotly-cartesian.min.js"

PUBLISHED_SHA256 = "79542150855a52c567260e3137095dbe2b744e6d702a5cabe67da246942fba7a"
PIN = {
    "package": "plotly.js-cartesian-dist-min",
    "version": "4.1.1",
    "sha256": "d8fb31ff67c80907132a6f933b39b25a31b5ff98d37fc80d00f8a28b28d08c3c",
    "traces": (
        "bar",
        "box",
        "contour",
        "heatmap",
        "histogram",
        "histogram2d",
        "histogram2dcontour",
        "image",
        "pie",
        "scatter",
        "scatterternary",
        "violin",
    ),
}

# Each trace module registers as ``{moduleType:"trace",name:"scatter",...}``.
_TRACE_MODULE = re.compile(r'moduleType:"trace",name:"(\w+)"')
_VERSION = re.compile(r"^\* plotly\.js \([a-z]+ - minified\) v(\S+)$", re.MULTILINE)


def bundle_trace_types(source: str) -> frozenset[str]:
    """The trace types a plotly.js bundle registers."""
    return frozenset(_TRACE_MODULE.findall(source))


def bundle_version(source: str) -> str | None:
    """The release named in a partial bundle's licence header."""
    match = _VERSION.search(source[:400])
    return match.group(1) if match else None
