"""Synthetic profiler artifacts at scale: a 2,000-step Chrome trace and a 100,000-entry
memory snapshot, each against a baseline measured in the same run.

    .venv/bin/python bench/enginesim_artifacts.py [--repeat 3]

Baselines: serialising the very output with the standard library (``json.dumps`` of the
rendered trace, ``pickle.dumps`` of the loaded snapshot). The ratio says how many times the
cost of merely writing the same bytes the generator spends; only the ratio is comparable
across machines. The unit tests prove the work is linear by counting calls
(tests/support/complexity.py) and assert no time at all.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")

from artifacts.safepickle import loads as safe_load
from enginesim.artifacts import dump_memory_snapshot, render_chrome_trace
from tests.enginesim.test_artifacts_chrome_trace import KW, mixed_steps
from tests.enginesim.test_artifacts_memory_snapshot import graph_growth_rank


def _best(fn, repeat: int) -> float:
    """The fastest of ``repeat`` runs: the least disturbed by whatever else runs."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()

    steps = mixed_steps(args.steps)
    trace = render_chrome_trace(steps, **KW)
    render = _best(lambda: render_chrome_trace(steps, **KW), args.repeat)
    baseline = _best(lambda: json.dumps(trace), args.repeat)
    print(f"Chrome trace, {args.steps:,} steps, {len(trace['traceEvents']):,} events")
    print(f"  json.dumps of the output (baseline) {baseline * 1e3:8.1f} ms")
    print(f"  render_chrome_trace                 {render * 1e3:8.1f} ms")
    print(f"  ratio: {render / baseline:.1f}x the baseline")

    rank = graph_growth_rank()
    data = dump_memory_snapshot(rank, max_entries=args.entries)
    loaded = safe_load(data)
    dump = _best(lambda: dump_memory_snapshot(rank, max_entries=args.entries), args.repeat)
    baseline = _best(lambda: pickle.dumps(loaded), args.repeat)
    print(f"Memory snapshot, {args.entries:,} trace entries, {len(data):,} B pickled")
    print(f"  pickle.dumps of the output (baseline) {baseline * 1e3:8.1f} ms")
    print(f"  dump_memory_snapshot                  {dump * 1e3:8.1f} ms")
    print(f"  ratio: {dump / baseline:.1f}x the baseline")


if __name__ == "__main__":
    main()
