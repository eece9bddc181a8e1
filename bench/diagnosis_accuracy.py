"""Diagnosis accuracy over randomised incidents (enginesim.draws), calibration vs held-out.

Usage: .venv/bin/python bench/diagnosis_accuracy.py [--draws 200] [--scenarios a b+c ...]
       [--poll 5] [--cycles 12] [--jobs 1] [--json out.json] [--quick]
       [--set both|calibration|held-out]

Each draw is one incident on a randomly drawn deployment (model, GPU, TP, bucket layout,
format, load, sources, seed). The simulator runs on a manual clock until the incident shows
(enginesim.draws.SymptomWatch: what an alert would see, checked every 15 s) or its deadline
passes; then the symptom's investigation opens and is polled every ``--poll`` seconds for
``--cycles`` cycles through the product's own path: the engine, dcgm and log bodies are
rendered in-process and handed to investigations.diagnose.Diagnosis (probes.observe ->
investigations.evaluation, what ``manage.py diagnose`` runs), uploaded artifacts go through
artifacts.analysis. No HTTP: the bodies are the ones the simulator's server would send.

Per scenario it prints, separately for the calibration draws (even seeds) and the held-out
draws (odd seeds): top-1 within two poll cycles (over draws whose sources can confirm a
true cause at all), true cause ever eliminated, decoy ever confirmed, time to the right
answer (median and p95 seconds after opening, over draws that got there), and the failure
digest: for draws whose top-1 after two cycles is wrong, what the true cause's checks and
the wrongly ranked cause's checks measured against their thresholds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")

WATCH_EVERY_S = 15.0
OPEN_EARLIEST_S = 60.0  # a minute of traffic before anyone can be paged
# Steps in an uploaded trace (the matrix takes 400; rendering costs grow faster than linearly).
TRACE_STEPS = 200


def _setup() -> None:
    import django

    django.setup()


def _diagnosis_class():
    from investigations.diagnose import Diagnosis

    class InProcessDiagnosis(Diagnosis):
        """Diagnose's engine with the simulator's bodies handed over in-process."""

        def __init__(self, *args, deployment, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.sim = deployment

        def cycle(self, now: float | None = None) -> None:
            from enginesim.exposition import dcgm, sglang, vllm

            d = self.sim
            d.sync()
            rep = d.replicas[0]
            eng = rep.engine
            for endpoint in self.endpoints:
                nxt = None
                if endpoint.kind == "engine":
                    if not eng.is_up:
                        endpoint.errors.append("HTTP 503")
                        continue
                    render = {
                        "vllm-v1": vllm.render_v1,
                        "vllm-v0": vllm.render_v0,
                        "sglang": sglang.render,
                    }[d.fmt]
                    body = render(eng, rep.engine_label).encode()
                elif endpoint.kind == "dcgm":
                    body = dcgm.render(rep.gpus, rep.hostname, d.now()).encode()
                else:
                    body, nxt, _ = eng.log.read(endpoint.offset, 1 << 20)
                if self._observe(endpoint, body, now) and nxt is not None:
                    endpoint.offset = nxt  # a followed log continues where this read ended

    return InProcessDiagnosis


def _artifact(engine, kind: str) -> tuple[bytes, str]:
    from enginesim import profiling

    if kind == "trace":
        records = profiling.step_records(engine, engine.step_idx - TRACE_STEPS, TRACE_STEPS)
        return profiling.chrome_trace(engine, records), ".json"
    if kind == "snapshot":
        return profiling.memory_snapshot(engine, 0), ".pickle"
    return profiling.gc_log(engine).encode(), ".log"


def _checks(node) -> list[dict]:
    return [
        {
            "check": c.id,
            "measured": c.measured,
            "outcome": c.outcome,
            "reason": c.reason,
            "confirm": c.confirm_threshold,
            "eliminate": c.eliminate_threshold,
        }
        for c in node.checks
    ]


def run_draw(scenario: str, seed: int, poll_s: float, cycles: int) -> dict:
    """One draw through the diagnosis path; a JSON-able record per symptom."""
    from artifacts.analysis import analyse_file
    from artifacts.errors import ArtifactRejected
    from deployments.budget import Budget
    from enginesim.deployment import SimClock
    from enginesim.draws import SymptomWatch, draw
    from investigations.playbook import playbooks
    from probes.policy import fetch_policy

    started = time.process_time()
    drawn = draw(scenario, seed)
    sim = drawn.deployment(SimClock("manual"))
    watch = SymptomWatch(drawn)
    books = playbooks()
    budget = Budget(**drawn.budget)
    out: dict[str, Any] = {
        "scenario": scenario,
        "seed": seed,
        "describe": drawn.describe(),
        "budget": drawn.budget,
        "notes": drawn.notes,
        "symptoms": {},
    }
    pending = list(drawn.symptoms)
    cls = _diagnosis_class()
    epoch = sim.epoch_unix
    while pending:
        # Advance until a pending symptom shows (or the deadline passes: opened anyway,
        # as the matrix opens each case at its time).
        shown: set[str] = set()
        while sim.now() < drawn.deadline_s:
            sim.advance(WATCH_EVERY_S)
            shown = watch.tick(sim) & set(pending)
            if shown and sim.now() >= OPEN_EARLIEST_S:
                break
        symptom = sorted(shown)[0] if shown else pending[0]
        pending.remove(symptom)
        book = books[symptom]
        relevant = set(drawn.causes) & {n.key for n in book.walk() if n.is_cause}
        targets = [(k, f"sim://{k}") for k in drawn.sources]
        diagnosis = cls(book, budget, targets, fetch_policy(), deployment=sim)
        opened = sim.now()
        with tempfile.TemporaryDirectory() as tmp:
            for n, kind in enumerate(drawn.artifacts):
                data, suffix = _artifact(sim.engines[0], kind)
                path = Path(tmp) / f"{kind}{suffix}"
                path.write_bytes(data)
                with contextlib.suppress(ArtifactRejected):
                    diagnosis.add_artifact(str(n), analyse_file(path), epoch + opened)
        record: dict[str, Any] = {
            "opened_s": opened,
            "shown": bool(shown),
            "relevant": sorted(relevant),
            "answerable": any(drawn.answerable(c) for c in relevant),
            "cycles": [],
            "eliminated": [],
            "decoys_confirmed": [],
            "right_at_s": None,
        }
        for n in range(cycles):
            if n:
                sim.advance(poll_s)
            now = epoch + sim.now()
            diagnosis.cycle(now=now)
            result = diagnosis.evaluate(now=now)
            nodes = result.causes()
            top = result.ranking[0] if result.ranking else None
            record["cycles"].append(top)
            for key in relevant:
                if nodes[key].suggestion == "eliminate" and key not in record["eliminated"]:
                    record["eliminated"].append(key)
                    record.setdefault("eliminated_checks", {})[key] = _checks(nodes[key])
            for key, node in nodes.items():
                fresh = key not in drawn.causes and key not in record["decoys_confirmed"]
                if fresh and node.suggestion == "confirm":
                    record["decoys_confirmed"].append(key)
                    record.setdefault("decoy_checks", {})[key] = _checks(node)
            if top in relevant and record["right_at_s"] is None:
                record["right_at_s"] = sim.now() - opened
            if n == 1:
                record["top1_after_two"] = top
                record["alarm"] = result.alarm.measured, result.alarm.threshold
                record["at_two"] = {
                    key: {"score": node.score, "suggestion": node.suggestion,
                          "checks": _checks(node)}
                    for key, node in nodes.items()
                    if key in relevant or key == top
                }  # fmt: skip
        out["symptoms"][symptom] = record
    out["cpu_s"] = time.process_time() - started
    out["sim_s"] = sim.now()
    return out


def _job(args: tuple[str, int, float, int]) -> dict:
    try:
        return run_draw(*args)
    except Exception as exc:  # a draw that cannot run is reported, not fatal
        return {"scenario": args[0], "seed": args[1], "error": f"{type(exc).__name__}: {exc}"}


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def _fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def summarise(records: list[dict]) -> list[dict]:
    """One row per (scenario, set, symptom)."""
    rows: dict[tuple, dict] = {}
    for rec in records:
        held = "held-out" if rec["seed"] % 2 else "calibration"
        if "error" in rec:
            row = rows.setdefault((rec["scenario"], held, "-"), _row(rec["scenario"], held, "-"))
            row["errors"] += 1
            continue
        for symptom, r in rec["symptoms"].items():
            row = rows.setdefault(
                (rec["scenario"], held, symptom), _row(rec["scenario"], held, symptom)
            )
            row["n"] += 1
            row["shown"] += r["shown"]
            if r["relevant"] and r["answerable"]:
                row["answerable"] += 1
                row["top1"] += r.get("top1_after_two") in r["relevant"]
                if r["right_at_s"] is not None:
                    row["times"].append(r["right_at_s"])
                else:
                    row["never"] += 1
            row["eliminated"] += bool(r["eliminated"])
            row["decoy"] += bool(r["decoys_confirmed"])
    return sorted(rows.values(), key=lambda r: (r["scenario"], r["set"], r["symptom"]))


def _row(scenario: str, held: str, symptom: str) -> dict:
    return {
        "scenario": scenario, "set": held, "symptom": symptom, "n": 0, "shown": 0,
        "answerable": 0, "top1": 0, "eliminated": 0, "decoy": 0, "times": [], "never": 0,
        "errors": 0,
    }  # fmt: skip


def print_table(rows: list[dict], which: str) -> None:
    print(f"\n== {which} draws ==")
    head = (
        f"{'scenario':32} {'symptom':10} {'n':>4} {'shown':>6} {'ans':>4} {'top1@2':>7} "
        f"{'elim':>6} {'decoy':>6} {'t_med':>6} {'t_p95':>6} {'never':>5} {'err':>4}"
    )
    print(head)
    for r in rows:
        if r["set"] != which:
            continue
        n, a = r["n"], r["answerable"]
        top1 = f"{100 * r['top1'] / a:.0f}%" if a else "-"
        elim = f"{100 * r['eliminated'] / n:.0f}%" if n else "-"
        decoy = f"{100 * r['decoy'] / n:.0f}%" if n else "-"
        median = statistics.median(r["times"]) if r["times"] else None
        print(
            f"{r['scenario']:32} {r['symptom']:10} {n:4} {r['shown']:6} {a:4} {top1:>7} "
            f"{elim:>6} {decoy:>6} {_fmt_s(median):>6} "
            f"{_fmt_s(_pct(r['times'], 0.95)):>6} {r['never']:5} {r['errors']:4}"
        )


def failure_digest(records: list[dict], limit: int = 6) -> None:
    """Why draws fail: for each wrong top-1 (and each eliminated true cause / confirmed
    decoy), the check outcomes with measured value vs threshold, counted by pattern."""
    patterns: dict[str, Counter] = defaultdict(Counter)
    examples: dict[tuple[str, str], str] = {}
    for rec in records:
        for symptom, r in rec.get("symptoms", {}).items():
            key = f"{rec['scenario']} / {symptom}"
            if r["relevant"] and r["answerable"] and r.get("top1_after_two") not in r["relevant"]:
                top = r.get("top1_after_two")
                for cause in r["relevant"]:
                    state = r["at_two"].get(cause, {})
                    why = ", ".join(f"{c['check']}:{c['outcome']}" for c in state.get("checks", []))
                    pattern = f"top1={top}; true {cause}[{state.get('suggestion')}]: {why}"
                    patterns[key][pattern] += 1
                    examples.setdefault((key, pattern), _example(rec, r, cause, top))
            for cause in r["eliminated"]:
                checks = r["eliminated_checks"][cause]
                why = ", ".join(f"{c['check']}:{c['outcome']}" for c in checks)
                pattern = f"ELIMINATED true {cause}: {why}"
                patterns[key][pattern] += 1
                examples.setdefault(
                    (key, pattern), rec["describe"] + "\n        " + _checks_text(checks)
                )
            for decoy in r["decoys_confirmed"]:
                checks = r["decoy_checks"][decoy]
                why = ", ".join(f"{c['check']}:{c['outcome']}" for c in checks)
                pattern = f"CONFIRMED decoy {decoy}: {why}"
                patterns[key][pattern] += 1
                examples.setdefault(
                    (key, pattern), rec["describe"] + "\n        " + _checks_text(checks)
                )
    if not patterns:
        return
    print("\n== failure digest (pattern counts, one example each) ==")
    for key in sorted(patterns):
        print(f"\n{key}")
        for pattern, count in patterns[key].most_common(limit):
            print(f"  {count:4} x {pattern}")
            print(f"        e.g. {examples[(key, pattern)]}")


def _checks_text(checks: list[dict]) -> str:
    return "; ".join(
        f"{c['check']}={_num(c['measured'])} ({c['outcome']}: {c['reason']})" for c in checks
    )


def _num(v: float | None) -> str:
    return "None" if v is None else f"{v:.4g}"


def _example(rec: dict, r: dict, cause: str, top: str | None) -> str:
    true = r["at_two"].get(cause, {})
    wrong = r["at_two"].get(top, {}) if top else {}
    return (
        f"{rec['describe']}\n        true {cause} score={true.get('score', 0):.3g}: "
        f"{_checks_text(true.get('checks', []))}\n        top {top} "
        f"score={wrong.get('score', 0):.3g}: {_checks_text(wrong.get('checks', []))}"
    )


def _progress(records: list[dict], rec: dict, total: int, started: float) -> None:
    records.append(rec)
    if len(records) % 50 == 0 or len(records) == total:
        elapsed = time.perf_counter() - started
        print(f"{len(records)}/{total} draws, {elapsed:.0f} s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    from enginesim.draws import PAIRS, SINGLES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=200, help="draws per scenario (both sets)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--scenarios", nargs="+", default=[*SINGLES, *PAIRS])
    parser.add_argument("--poll", type=float, default=5.0, help="poll interval, seconds")
    parser.add_argument("--cycles", type=int, default=12, help="poll cycles after opening")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write every draw's record here")
    parser.add_argument("--quick", action="store_true", help="2 draws of 2 scenarios, 3 cycles")
    parser.add_argument(
        "--set",
        choices=("both", "calibration", "held-out"),
        default="both",
        help="run only one set's seeds (calibration: even, held-out: odd), so that the "
        "failure digest of a calibration run never shows a held-out draw",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.draws, args.cycles = 2, 3
        args.scenarios = ["gc-pauses", "healthy"]
    jobs = [
        (s, seed, args.poll, args.cycles)
        for s in args.scenarios
        for seed in range(args.first_seed, args.first_seed + args.draws)
        if args.set == "both" or (seed % 2 == 1) == (args.set == "held-out")
    ]
    wall = time.perf_counter()
    records: list[dict] = []
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs, initializer=_setup) as pool:
            for rec in pool.imap(_job, jobs, chunksize=1):
                _progress(records, rec, len(jobs), wall)
    else:
        _setup()
        for job in jobs:
            _progress(records, _job(job), len(jobs), wall)
    wall = time.perf_counter() - wall
    rows = summarise(records)
    print(
        f"draws: {len(jobs)} ({args.draws} seeds per scenario, set {args.set}; even seeds "
        "calibration, odd held-out), "
        f"poll {args.poll:g} s x {args.cycles} cycles, {args.jobs} process(es), wall {wall:.0f} s, "
        f"cpu per draw median {statistics.median(r.get('cpu_s', 0) for r in records):.2f} s"
    )
    print(
        "columns: shown = alarm showed before the deadline; ans = a true cause's sources are "
        "present; top1@2 = true cause first after 2 cycles (of ans); elim = a true cause "
        "eliminated at any cycle; decoy = a non-true cause confirmed at any cycle; t_med/t_p95 "
        "= seconds after opening to a true top-1; never = ans draws that never got there"
    )
    print_table(rows, "calibration")
    print_table(rows, "held-out")
    failure_digest(records)
    for rec in records:
        if "error" in rec:
            print(f"ERROR {rec['scenario']} seed {rec['seed']}: {rec['error']}")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
