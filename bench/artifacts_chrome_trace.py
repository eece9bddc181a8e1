"""Chrome-trace load + analysis: artifacts.chrome_trace/trace_analysis vs HTA's first step.

Usage: .venv/bin/python bench/artifacts_chrome_trace.py [--events 1000000] [--skip-synthetic]

Baseline (named, measured in the same run): what HolisticTraceAnalysis' default JSON
backend does before any analysis - ``gzip.open().read()``, ``json.loads`` of the whole
file, then one dict row per event with the ``args`` it explodes into columns (the input
of ``pandas.DataFrame``). Ours: ``load_chrome_trace`` (streaming) + ``analyse_trace``.
Each side runs in its own subprocess so ``ru_maxrss`` is that side's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SAMPLE = "hta_df_index_resolver_v100_216k_events.json.gz"

_BASELINE = r"""
import gzip, json, resource, sys, time
t = time.perf_counter()
with gzip.open(sys.argv[1], "rb") as fh:
    doc = json.loads(fh.read())
keep = ("stream", "correlation", "External id", "Trace iteration", "memory bandwidth (GB/s)")
rows = []
for e in doc["traceEvents"]:
    if "dur" not in e or "cat" not in e:
        continue
    row = {k: v for k, v in e.items() if k not in ("ph", "id", "bp", "s", "args")}
    args = e.get("args") or {}
    for k in keep:
        row[k] = args.get(k, -1)
    rows.append(row)
elapsed = time.perf_counter() - t
print(json.dumps({"s": elapsed, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": len(rows)}))
"""

_OURS = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from artifacts.chrome_trace import load_chrome_trace
from artifacts.trace_analysis import analyse_trace
t = time.perf_counter()
trace = load_chrome_trace(sys.argv[1])
loaded = time.perf_counter() - t
result = analyse_trace(trace).as_dict()
elapsed = time.perf_counter() - t
print(json.dumps({"s": elapsed, "load_s": loaded,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "events": trace.events_total}))
"""


def _run(code: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def _compare(label: str, path: Path) -> None:
    base = _run(_BASELINE, path)
    ours = _run(_OURS, path)
    mb = path.stat().st_size / 1e6
    print(f"{label}: {path.name} ({mb:.1f} MB on disk, {ours['events']:,} events)")
    label_base = "HTA JSON backend first step (baseline)"
    print(f"  {label_base:42s} {base['s']:7.2f} s  {base['rss_mb']:7.0f} MB RSS")
    print(
        f"  {'stream + analyse (ours)':42s} {ours['s']:7.2f} s  {ours['rss_mb']:7.0f} MB RSS"
        f"  (load {ours['load_s']:.2f} s)"
    )
    print(
        f"  ratio ours/baseline: time {ours['s'] / base['s']:.2f}x, "
        f"peak RSS {ours['rss_mb'] / base['rss_mb']:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_002)
    parser.add_argument("--skip-synthetic", action="store_true")
    args = parser.parse_args()
    from tests.support.samples import CHROME_TRACES

    _compare("largest real sample", CHROME_TRACES / SAMPLE)
    if not args.skip_synthetic:
        from tests.artifacts.test_chrome_trace import _write_big_trace

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "synthetic.pt.trace.json.gz"
            raw = _write_big_trace(path, args.events)
            _compare(f"synthetic ({raw / 1e6:.0f} MB raw JSON)", path)


if __name__ == "__main__":
    main()
