"""Where the shared real-world captures live: ``../shared/samples`` beside the checkout.

They are read from there, never copied into the repository. CI lays a copy of
shared/ beside its clone, so missing samples fail there and skip elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ATLAS_SHARED_DIR", REPO.parent / "shared"))
SAMPLES = SHARED / "samples"
METRICS = SAMPLES / "metrics"
# Verbatim excerpts users posted, one sidecar `<file>.source.txt` each (ground truth).
REAL = SAMPLES / "real"
PROFILER = SAMPLES / "profiler"
MEMORY_SNAPSHOTS = PROFILER / "memory_snapshots"
CHROME_TRACES = PROFILER / "chrome_traces"


def samples_absent(path: Path = SAMPLES) -> bool:
    """True when a test may skip for lack of samples: never in CI, which promises them."""
    return not path.exists() and os.environ.get("CI", "").lower() != "true"
