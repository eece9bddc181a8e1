"""Memory-snapshot load + analysis: artifacts.memory_snapshot vs stock pickle + _memory_viz.

Usage: .venv/bin/python bench/artifacts_memory_snapshot.py [--repeat 5] [--root PATH]
       (--root: measure another checkout's artifacts package, e.g. a `git archive` of the
       previous commit, for before/after figures)

Times are CPU seconds of this process (``time.process_time``, best of ``--repeat``): on a
shared machine wall time measures the neighbours. Three ratios, each against its named
baseline measured in the same run on the same bytes:

- load: ``safepickle.loads`` (opcode pre-scan, restricted C unpickler, structure walk) vs
  ``pickle.loads`` (the stock unpickler). Target: at most 2x. The samples are files users
  posted, so the stock unpickler never reads them: each is loaded by ``safepickle`` (a graph
  of builtins only), pickled again by this process, and both loaders are timed on those
  bytes (the same length as the file for every sample, and equal when loaded back). Two
  rows: the generic loader (``walk=True``, the default) and the path ``load_snapshot`` takes
  (``walk=False``: its schema walk, ``validate``, replaces the generic one and is counted in
  the analysis row).
- analysis: schema validation + the full analysis (``validate`` + ``analyse_snapshot``:
  backward timeline, steps, leak metrics, sites, findings) vs ``_memory_viz.segsum`` +
  ``_memory_viz.trace`` on the same loaded object, i.e. what an analyst runs by hand.
  Target: at least 5x faster.
- end to end: ``load_snapshot`` + ``analyse_snapshot`` vs ``pickle.loads`` + segsum + trace.

torch is needed for the _memory_viz baseline only; without it those columns are skipped.

Both sides run under the collector policy of the artifact worker that analyses uploads
(``atlas_console.gc_policy``: start-up heap frozen, young collections every 50,000 net
allocations), applied once the imports are done, torch's included; ``--gc-default`` keeps
CPython's defaults instead (there, the collector's walks over torch's heap, which the
worker never imports, are charged to whichever side allocates more containers).
"""

from __future__ import annotations

import argparse
import gc
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _enginesim_snapshot() -> bytes:
    from enginesim import profiling
    from enginesim.deployment import Deployment, SimClock

    d = Deployment("healthy", clock=SimClock("manual"))
    d.advance(900.0)  # a full 100,000-entry ring buffer
    return profiling.memory_snapshot(d.engines[0], 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose artifacts to run")
    parser.add_argument("--no-enginesim", action="store_true", help="real samples only")
    parser.add_argument(
        "--gc-default", action="store_true", help="CPython's collector defaults, not the worker's"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.support.samples import MEMORY_SNAPSHOTS

    enginesim = None if args.no_enginesim else _enginesim_snapshot()
    for name in [m for m in list(sys.modules) if m == "artifacts" or m.startswith("artifacts.")]:
        del sys.modules[name]  # measure --root's package, not the one enginesim imported
    sys.path.insert(0, str(args.root.resolve()))
    from artifacts import safepickle
    from artifacts.bounded import Deadline
    from artifacts.memory_analysis import analyse_snapshot
    from artifacts.memory_snapshot import load_snapshot, validate

    try:
        from torch.cuda import _memory_viz
    except ImportError:  # pragma: no cover
        _memory_viz = None
    if not args.gc_default:
        from atlas_console.gc_policy import tune_for_worker

        print(f"collector: the worker's policy, thresholds {tune_for_worker()}")
    else:
        print(f"collector: CPython's defaults, thresholds {gc.get_threshold()}")
    inputs = {p.name: p.read_bytes() for p in sorted(MEMORY_SNAPSHOTS.glob("*")) if p.is_file()}
    if enginesim is not None:
        inputs["enginesim healthy 100k entries (synthetic)"] = enginesim
    print(f"artifacts from {args.root.resolve()}; CPU ms, best of {args.repeat}")
    for name, posted in inputs.items():
        obj = safepickle.loads(posted)
        data = pickle.dumps(obj)  # bytes of our own, from a graph safepickle let through
        viz_obj = {"segments": obj, "device_traces": []} if isinstance(obj, list) else obj
        r = args.repeat
        stock = _best(lambda data=data: pickle.loads(data), r)  # noqa: S301 - our own bytes
        safe = _best(lambda data=data: safepickle.loads(data), r)
        try:
            nowalk = _best(lambda data=data: safepickle.loads(data, walk=False), r)
        except TypeError:  # an older checkout (--root): no walk=False
            nowalk = None
        ours_an = _best(lambda obj=obj: analyse_snapshot(validate(obj, 10**9, Deadline(300))), r)
        ours_e2e = _best(lambda data=data: analyse_snapshot(load_snapshot(data)), r)
        print(f"{name}: {len(posted):,} B ({len(data):,} B as pickled again)")
        print(
            f"  load      safepickle.loads {safe * 1e3:8.1f}  pickle.loads {stock * 1e3:8.1f}",
            end="",
        )
        print(f"  ours/stock {safe / stock:5.2f}x (target <= 2x)")
        if nowalk is not None:
            print(
                f"  load      loads(walk=False){nowalk * 1e3:8.1f}  pickle.loads {stock * 1e3:8.1f}"
                f"  ours/stock {nowalk / stock:5.2f}x (load_snapshot's path)"
            )
        if _memory_viz is None:
            print(
                f"  analysis  validate+analyse {ours_an * 1e3:8.1f}  (no torch: baseline skipped)"
            )
            continue

        def viz(o: object = viz_obj) -> None:
            _memory_viz.segsum(o)
            _memory_viz.trace(o)

        base_an = _best(viz, r)
        print(
            f"  analysis  validate+analyse {ours_an * 1e3:8.1f}  segsum+trace {base_an * 1e3:8.1f}",
            end="",
        )
        print(f"  speed-up {base_an / ours_an:5.2f}x (target >= 5x)")
        base_e2e = stock + base_an
        print(
            f"  end2end   load+analyse     {ours_e2e * 1e3:8.1f}"
            f"  loads+viz    {base_e2e * 1e3:8.1f}",
            end="",
        )
        print(f"  speed-up {base_e2e / ours_e2e:5.2f}x")


if __name__ == "__main__":
    main()
