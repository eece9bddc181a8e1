"""Chrome-trace load + analysis: artifacts.chrome_trace/trace_analysis vs HTA (first step; full).

Usage: .venv/bin/python bench/artifacts_chrome_trace.py [--events 1000000] [--skip-synthetic]
       [--root PATH]   (measure another checkout's artifacts package, e.g. a `git archive`
                        of an older commit, for before/after figures)
       [--hta-python PATH]  (a Python with HolisticTraceAnalysis installed, kept out of the
                        project's venv: `python3 -m venv /tmp/hta && /tmp/hta/bin/pip install
                        HolisticTraceAnalysis==0.5.0`; adds the real HTA as a second baseline)

Baseline (named, measured in the same run): what HolisticTraceAnalysis' default JSON
backend does before any analysis - ``gzip.open().read()``, ``json.loads`` of the whole
file, then one dict row per event with the ``args`` it explodes into columns (the input
of ``pandas.DataFrame``). HTA itself is not installed here; this first step is a lower
bound on its cost. Ours: ``load_chrome_trace`` (streaming) + ``analyse_trace``.

With ``--hta-python``, the real thing too: HTA 0.5's ``TraceAnalysis`` over a folder holding
the one file (its parser, JSON backend) plus ``get_temporal_breakdown``,
``get_idle_time_breakdown`` and ``get_gpu_kernel_breakdown`` - the figures our analysis is
compared with (to the event, in tests/artifacts/test_trace_analysis.py). Its CPU counts
child processes as well (HTA may parse in a pool).

Each side runs in its own subprocess, so ``ru_maxrss`` is that side's peak RSS and
``ru_utime + ru_stime`` its CPU. Throughput is raw (decompressed) JSON bytes per CPU-second,
i.e. MB/s per core: on this shared machine wall time measures the neighbours, CPU time much
less so (it still inflates under contention, so compare the ratios of one run).
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

_CPU = """
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
"""

_BASELINE = (
    r"""
import gzip, json, resource, sys, time
"""
    + _CPU
    + r"""
c0 = cpu()
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
print(json.dumps({"s": elapsed, "cpu_s": cpu() - c0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": len(rows)}))
"""
)

_OURS = (
    r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from artifacts.chrome_trace import load_chrome_trace
from artifacts.trace_analysis import analyse_trace
"""
    + _CPU
    + r"""
c0 = cpu()
t = time.perf_counter()
trace = load_chrome_trace(sys.argv[1])
loaded = time.perf_counter() - t
load_cpu = cpu() - c0
result = analyse_trace(trace).as_dict()
elapsed = time.perf_counter() - t
print(json.dumps({"s": elapsed, "load_s": loaded, "cpu_s": cpu() - c0, "load_cpu_s": load_cpu,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "events": trace.events_total, "raw_bytes": trace.input_bytes}))
"""
)


_HTA = r"""
import json, os, resource, sys, tempfile, time
def cpu():
    cpu = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        cpu += r.ru_utime + r.ru_stime
    return cpu
c0 = cpu()
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
with tempfile.TemporaryDirectory() as folder:
    os.symlink(sys.argv[1], os.path.join(folder, os.path.basename(sys.argv[1])))
    analysis = TraceAnalysis(trace_dir=folder)
    ranks = sorted(analysis.t.traces)
    analysis.get_temporal_breakdown(visualize=False)
    analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)
    analysis.get_gpu_kernel_breakdown(visualize=False)
elapsed = time.perf_counter() - t
peak = max(resource.getrusage(w).ru_maxrss
           for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(json.dumps({"s": elapsed, "cpu_s": cpu() - c0, "rss_mb": peak / 1024}))
"""


def _run(code: str, path: Path, root: Path, python: str = sys.executable) -> dict:
    out = subprocess.run(
        [python, "-c", code, str(path), str(root)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _compare(label: str, path: Path, root: Path, hta_python: str | None = None) -> None:
    base = _run(_BASELINE, path, root)
    ours = _run(_OURS, path, root)
    hta = _run(_HTA, path, root, hta_python) if hta_python else None
    raw_mb = ours["raw_bytes"] / 1e6
    print(
        f"{label}: {path.name} ({path.stat().st_size / 1e6:.1f} MB on disk, {raw_mb:.0f} MB raw "
        f"JSON, {ours['events']:,} events)"
    )
    rows = (
        *(
            (("HTA 0.5 TraceAnalysis + 3 breakdowns", hta["s"], hta["cpu_s"], hta["rss_mb"]),)
            if hta
            else ()
        ),
        ("HTA JSON backend first step (baseline)", base["s"], base["cpu_s"], base["rss_mb"]),
        ("load (ours, streaming)", ours["load_s"], ours["load_cpu_s"], None),
        ("load + analyse (ours)", ours["s"], ours["cpu_s"], ours["rss_mb"]),
    )
    for name, wall, cpu, rss in rows:
        rss_text = f"{rss:7.0f} MB RSS" if rss is not None else " " * 14
        print(
            f"  {name:40s} {wall:7.2f} s wall {cpu:7.2f} CPU-s {rss_text}"
            f"  {raw_mb / cpu:6.1f} MB/s per core"
        )
    print(
        f"  ratio ours/baseline: CPU {ours['cpu_s'] / base['cpu_s']:.3f}x "
        f"({base['cpu_s'] / ours['cpu_s']:.1f}x less), load alone "
        f"{ours['load_cpu_s'] / base['cpu_s']:.3f}x, wall {ours['s'] / base['s']:.2f}x, "
        f"peak RSS {ours['rss_mb'] / base['rss_mb']:.3f}x"
    )
    if hta:
        print(
            f"  ratio ours/HTA 0.5: CPU {ours['cpu_s'] / hta['cpu_s']:.3f}x "
            f"({hta['cpu_s'] / ours['cpu_s']:.1f}x less; target >= 10x), wall "
            f"{ours['s'] / hta['s']:.2f}x, peak RSS {ours['rss_mb'] / hta['rss_mb']:.3f}x "
            f"(target <= 0.1x); ours {raw_mb / ours['cpu_s']:.0f} MB/s per core load + analyse "
            f"(target >= 100)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_002)
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose artifacts to run")
    parser.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis 0.5 installed")
    args = parser.parse_args()
    if not (args.root / "artifacts" / "chrome_trace.py").is_file():
        parser.error(f"--root {args.root} holds no artifacts/chrome_trace.py")
    from tests.support.samples import CHROME_TRACES

    _compare("largest real sample", CHROME_TRACES / SAMPLE, args.root, args.hta_python)
    if not args.skip_synthetic:
        from tests.artifacts.test_chrome_trace import _write_big_trace

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "synthetic.pt.trace.json.gz"
            raw = _write_big_trace(path, args.events)
            _compare(f"synthetic ({raw / 1e6:.0f} MB raw JSON)", path, args.root, args.hta_python)


if __name__ == "__main__":
    main()
