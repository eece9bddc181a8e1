"""Memory-snapshot load + analysis: artifacts.memory_snapshot vs stock pickle + _memory_viz.

Usage: .venv/bin/python bench/artifacts_memory_snapshot.py [--repeat 3]

Baseline (named, measured in the same run): ``pickle.load`` (the unsafe stock unpickler,
fine here on trusted local files) followed by ``torch.cuda._memory_viz.segsum`` and
``_memory_viz.trace``, i.e. what an analyst runs by hand. Ours: bounded read, opcode
pre-scan, restricted unpickler, structure walk, schema validation and the full analysis
(backward timeline, steps, leak metrics, sites, findings). torch is needed for the baseline
only; without it the baseline column is skipped.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from artifacts.memory_snapshot import analyse_snapshot, load_snapshot
from tests.support.samples import MEMORY_SNAPSHOTS


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _enginesim_snapshot() -> bytes:
    from enginesim import profiling
    from enginesim.deployment import Deployment, SimClock

    d = Deployment("healthy", clock=SimClock("manual"))
    d.advance(900.0)  # a full 100,000-entry ring buffer
    return profiling.memory_snapshot(d.engines[0], 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:
        from torch.cuda import _memory_viz
    except ImportError:  # pragma: no cover
        _memory_viz = None
    inputs = {p.name: p.read_bytes() for p in sorted(MEMORY_SNAPSHOTS.glob("*")) if p.is_file()}
    inputs["enginesim healthy 100k entries"] = _enginesim_snapshot()
    for name, data in inputs.items():
        ours = _best(lambda data=data: analyse_snapshot(load_snapshot(data)), args.repeat)

        def baseline(data: bytes = data) -> None:
            obj = pickle.loads(data)  # noqa: S301 - baseline on trusted local files
            obj = {"segments": obj, "device_traces": []} if isinstance(obj, list) else obj
            _memory_viz.segsum(obj)
            _memory_viz.trace(obj)

        print(f"{name}: {len(data):,} B")
        print(f"  artifacts.memory_snapshot (load+analyse)  {ours * 1e3:9.1f} ms")
        if _memory_viz is not None:
            base = _best(baseline, args.repeat)
            print(f"  pickle.load + _memory_viz (baseline)     {base * 1e3:9.1f} ms")
            print(f"  ratio ours/baseline: {ours / base:.2f}x")


if __name__ == "__main__":
    main()
