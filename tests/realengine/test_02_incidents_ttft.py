"""Real incidents on a real vLLM, diagnosed by ``manage.py diagnose`` within two poll cycles.

Every load is sized from the calibration measured at the start of this run
(``realengine.sizing``): a multiple of what this engine, on this machine, right now,
serves of that request shape. Fixed rates made the incidents depend on the machine (on an
idle one the engine served 8 requests/s and no alarm fired). Each budget carries the
measured constants and the engine's own KV capacity, never Atlas's.

- healthy traffic (0.4x capacity): nothing confirmed, the alarm clear;
- KV-cache pressure (2x what the KV cache lets the default engine serve, seats to spare):
  preemptions, ``kv-cache-pressure`` first and confirmed, a max-num-seqs fix suggested;
  left unfixed the fix's verification fails; applied by the engine controller (restart
  with the suggested seats) it is verified under an arrival process the fixed engine can
  serve (Poisson at 0.5x its calibrated capacity);
- plain overload (eight seats, 2x what they serve, KV far from full): ``queue-backlog``
  first and KV pressure eliminated with evidence.

What "left unfixed it keeps failing" can mean on this engine: the unfixed engine fails
the fix's criteria over the incident's own arrivals (KV 1.0, preemptions, ~85 waiting). It
would pass them under the verification's arrivals, and no stationary Poisson rate tells the
two apart: by Little's law both engines hold rate x service requests, and a rate the fixed
engine serves keeps that under its seats (measured: 20 seats at 2 requests/s, waiting 0.0
throughout, KV max 0.48), so the seat cap never binds and the unfixed engine would run the
same schedule. Fewer seats only pay where a preemption costs more than the seat it frees
(GPU recompute of long contexts); here re-prefill costs ~0.05-0.16 ms a token.
"""

from __future__ import annotations

import time

import yaml

from deployments.budget import Budget
from investigations.diagnose import evaluation_json
from investigations.evaluation import WINDOW_COVERAGE
from investigations.playbook import get_playbook
from realengine import EngineFlags
from realengine.calibrate import batch_sender, cautious, served_per_s, tiny_budget
from realengine.controller import apply_fix
from realengine.sizing import (
    SizingError,
    healthy_load,
    kv_pressure_load,
    overload_load,
    serving_load,
)
from tests.realengine.conftest import calibrate_engine, keep_scrape, record, ttft_target_ms
from tests.realengine.incidents import Load, describe, diagnose, evidence, nodes, write_budget
from tests.realengine.verifying import MachineShare, Poller, criteria, judge, scaled_fix

CPU_DEFAULT_SEQS = 128  # vLLM's CPU default for the API server (its log: max_num_seqs=128)
CPU_DEFAULT_BATCHED = 2048
VERIFY_FACTOR = 0.5  # the verification's arrivals: at most half what the fixed engine serves
# and at most this share of them finding every seat taken (Erlang C). The alarm's p95 TTFT
# lets 5 % be late, and one that waits for a seat waits hundreds of ms (a ~2 s request over
# nine seats): at 0.5x nine seats make 4.6 % wait, and the p95 sat on that edge (0.39 s
# passing; 0.65 s over the 0.5 s target in CI on 2026-12-06). A fifth of the SLO's share.
VERIFY_WAIT_SHARE = 0.01
VERIFY_S = 60.0
DIAGNOSE_INTERVAL_S = 10.0
OVERLOAD_SEATS = 8


def _budget(tmp_path, name, calibration, costs, **overrides):
    constants = tiny_budget(
        calibration, kv_tokens=costs.kv_tokens, max_num_seqs=CPU_DEFAULT_SEQS,
        max_num_batched_tokens=CPU_DEFAULT_BATCHED, ttft_target_ms=ttft_target_ms(calibration),
        itl_ceiling_ms=100.0,
    )  # fmt: skip
    constants.update(overrides)
    record(f"budget.{name}", constants)
    return write_budget(tmp_path, name, constants)


def _under_load(engine, load, *, symptom: str, budget, seed: int) -> tuple:
    plan = load.plan(seed)
    running = Load(plan, engine.url, deadline_s=load.duration_s + 60, seed=seed).start()
    time.sleep(load.warmup_s)
    # Two cycles 10 s apart: under KV pressure the engine admits in bursts (the log showed
    # 10 s windows with no prompt tokens at all), and a 5 s window may then hold no first
    # token, so p95 TTFT is honestly unmeasured and the alarm cannot be judged.
    report = diagnose(symptom, engine.metrics_url, budget, interval_s=DIAGNOSE_INTERVAL_S)
    keep_scrape(budget.stem, engine.metrics_url)  # what the product read, for the record
    return report, running.join(), plan


def _sent(sent: dict) -> dict:
    return {k: sent[k] for k in ("statuses", "ttft_s", "e2e_s", "errors")}


def test_healthy_traffic_confirms_nothing(engines, calibration, costs, tmp_path):
    engine = engines.serve(EngineFlags())
    # Healthy traffic must be served: sized against the slowest step the calibration saw,
    # within the largest batch it measured (16), not extrapolated to the 32 the KV would
    # hold (at 0.4x of that a busy machine's p95 TTFT reached 3.6 s).
    load = healthy_load(cautious(costs, calibration), seats=max(calibration.batch_step_ms))
    budget = _budget(tmp_path, "healthy", calibration, costs)
    report, sent, plan = _under_load(engine, load, symptom="high-ttft", budget=budget, seed=3)
    record("load.healthy", {**load.as_dict(), "sent": _sent(sent)})
    assert report["alarm"]["firing"] is False, describe(report)
    assert report["root_cause"] is None, describe(report)
    confirmed = [k for k, n in nodes(report).items() if n["suggestion"] == "confirm"]
    assert confirmed == [], describe(report)
    # Every request served. One stream in ~240 used to end in a client-side ReadError: the
    # load generator reused connections the engine's server was closing (both sides kept an
    # idle connection 5 s); it no longer reuses any (loadgen.client), so any error here is
    # the engine's or the machine's, and worth failing on.
    assert sent["statuses"] == {"ok": len(plan)}, sent["errors"]


def test_kv_cache_pressure_ranks_first_and_only_the_applied_fix_verifies(
    engines, calibration, costs, tmp_path
):
    engine = engines.serve(EngineFlags())
    load = kv_pressure_load(costs, seats=CPU_DEFAULT_SEQS)
    path = _budget(tmp_path, "kv-pressure", calibration, costs)
    budget = Budget(**yaml.safe_load(path.read_text()))
    with Poller("high-ttft", budget, engine.metrics_url, max_s=load.duration_s + 120) as unfixed:
        report, sent, _ = _under_load(engine, load, symptom="high-ttft", budget=path, seed=1)
    record("load.kv_pressure", {**load.as_dict(), "sent": _sent(sent)})
    tree = nodes(report)
    kv = tree["kv-cache-pressure"]
    record("diagnose.kv_pressure", {"ranking": report["ranking"], "root": report["root_cause"],
                                    "fix": kv["fix"], "expected": report["expected"]})  # fmt: skip
    assert report["alarm"]["firing"] is True, describe(report)
    assert report["ranking"][0] == "kv-cache-pressure", describe(report)
    checks = evidence(kv)
    assert checks["kv-usage"]["outcome"] == "confirm"
    assert checks["preemption-rate"]["outcome"] == "confirm"  # real preemptions
    if report["root_cause"] != "kv-cache-pressure":
        # Held back only by the leak's veto in doubt (2 of 5 real storms here): the
        # requests a V1 storm leaves running are the furthest through their outputs, and
        # at prompt plus half an output they account for ~0.6 of a 0.97-full cache. Ranked
        # first on confirmed usage and preemptions, it is what the commander confirms.
        assert report["root_cause"] is None, describe(report)
        assert kv["suggestion"] == "inconclusive", describe(report)
        assert checks["kv-held-by-running"]["outcome"] == "inconclusive", describe(report)
    suggested = kv["fix"]
    seats = int(suggested["parameters"]["max_num_seqs"])
    assert 1 <= seats < CPU_DEFAULT_SEQS
    # Decoys ruled out with evidence: plain capacity (vetoed by the preemptions) and slow
    # prefill (on budget). A leak is never confirmed; with usage at ~0.99 against what the
    # running requests hold it may honestly stay inconclusive.
    assert tree["queue-backlog"]["suggestion"] == "eliminate", describe(report)
    assert tree["prefill-slow"]["suggestion"] == "eliminate", describe(report)
    assert tree["kv-block-leak"]["suggestion"] != "confirm", describe(report)

    # Left unfixed, the fix's verification fails over the incident itself.
    fix = scaled_fix("high-ttft", "kv-cache-pressure", window_s=int(load.duration_s))
    left_alone = judge(fix, budget, unfixed, suggested["parameters"])
    record("verify.kv.unfixed", criteria(left_alone))
    assert left_alone.state == "failing", criteria(left_alone)

    applied = apply_fix(engine, suggested["apply"])  # restart with the suggested seats
    record("restart_s.kv_fix", round(applied.restart_s, 1))
    assert applied.after.max_num_seqs == seats
    # Verified under arrivals the fixed engine can serve: Poisson at half what the
    # suggested seats serve of the incident's request shape, by a calibration of the
    # restarted engine (the machine's load changes over minutes; the first calibration
    # read a 15 ms step where the incident's engine decoded at ~27 ms a token).
    fixed_calibration, fixed_costs = calibrate_engine(engine, "calibration.kv_fixed")
    # And what the fixed engine serves of the incident's shape with every seat taken,
    # measured: a guard against the idle linear step model over-reading a full batch (in
    # the runs so far the batch was served faster than modelled; the seat waits that failed
    # CI on 2026-12-06 are what VERIFY_WAIT_SHARE answers).
    served = served_per_s(batch_sender(engine.url, "tiny-llama"),
                          prompt=round(load.shape.prompt_mean),
                          output=round(load.shape.output_mean), seats=seats)  # fmt: skip
    record("served_per_s.kv_fixed", round(served, 4))
    serving = serving_load(cautious(fixed_costs, fixed_calibration), load.shape, seats=seats,
                           factor=VERIFY_FACTOR, duration_s=VERIFY_S, served_per_s=served,
                           wait_share=VERIFY_WAIT_SHARE)  # fmt: skip
    plan = serving.plan(seed=2)
    # The SLO the fixed engine is held to comes from the same calibration its arrivals are
    # sized from: the first one can be minutes and a 6x change of machine speed older
    # (decode steps read 3.7-24 ms within an hour here), and against it a verification
    # sized for a slower machine was judged by a faster machine's target.
    fixed_path = _budget(tmp_path, "kv-fixed", fixed_calibration, fixed_costs)
    fixed_budget = Budget(**yaml.safe_load(fixed_path.read_text()))
    verify_fix = scaled_fix("high-ttft", "kv-cache-pressure", window_s=int(VERIFY_S))
    share = MachineShare(engine.process.pid)
    with Poller("high-ttft", fixed_budget, engine.metrics_url, max_s=VERIFY_S + 120) as fixed:
        sent_fixed = Load(plan, engine.url, deadline_s=VERIFY_S + 60, seed=2).start().join()
        # Judged once the whole window has passed and been polled, never earlier: a
        # verification judged before its window ends is pending, not passing.
        fixed.wait_until(fixed.started + VERIFY_S)
    keep_scrape("kv-fixed", engine.metrics_url)
    verdict = judge(verify_fix, fixed_budget, fixed, suggested["parameters"])
    record("load.kv_verify", {**serving.as_dict(), "sent": _sent(sent_fixed)})
    machine = share.report()
    record("verify.kv.fixed", criteria(verdict))
    record("verify.kv.machine", machine)
    assert verdict.state == "passing", f"{criteria(verdict)}\nCPU over the window: {machine}"


def test_plain_overload_is_queue_backlog_with_kv_eliminated(engines, calibration, costs,
                                                            tmp_path):  # fmt: skip
    # A seat cap of at most OVERLOAD_SEATS that binds before the KV cache will do (the KV
    # fix's restart may leave one running; a fresh start costs two minutes), else eight.
    # More seats stream more tokens a second at twice their capacity: with the 14 the KV
    # fix left, 27 requests/s streamed ~6,000 tokens/s, and on a starved machine the
    # engine's API server fell behind its sockets (connect timeouts, the engine core
    # running one request at the diagnosis): an incident of the server, not of the seats.
    def seat_bound(flags: EngineFlags) -> bool:
        if flags.max_num_seqs is None or flags.max_model_len != EngineFlags().max_model_len:
            return False
        if flags.max_num_seqs > OVERLOAD_SEATS:
            return False
        try:
            overload_load(costs, seats=flags.max_num_seqs)
        except SizingError:
            return False
        return True

    engine = engines.serve_matching(seat_bound, EngineFlags(max_num_seqs=OVERLOAD_SEATS))
    load = overload_load(costs, seats=engine.flags.max_num_seqs)
    # KV pressure is ruled out by "KV usage stayed under 0.8", a claim about its whole
    # 300 s window that needs samples over a quarter of it (absence is not evidence): two
    # cycles 10 s apart cannot make it. So the engine is polled from the load's start
    # through the backlog's drain, the way the console's light cadence keeps a
    # deployment's history, until that span is covered. The load itself is not lengthened:
    # at twice capacity its backlog only grows, and past ~250 requests in flight the
    # engine's API server, not its seats, is what a starved machine measures.
    evidence_s = _window_s("high-ttft", "kv-usage") * WINDOW_COVERAGE
    path = _budget(tmp_path, "overload", calibration, costs, max_num_seqs=load.seats)
    budget = Budget(**yaml.safe_load(path.read_text()))
    with Poller("high-ttft", budget, engine.metrics_url, max_s=load.duration_s + 120) as watch:
        report, sent, _ = _under_load(engine, load, symptom="high-ttft", budget=path, seed=4)
        watch.wait_until(watch.started + evidence_s)
    record("load.overload", {**load.as_dict(), "sent": _sent(sent)})
    # Within two poll cycles: the right cause first, the alarm firing, the queue confirmed.
    tree = nodes(report)
    assert report["alarm"]["firing"] is True, describe(report)
    assert report["ranking"][0] == "queue-backlog", describe(report)
    assert tree["kv-cache-pressure"]["suggestion"] != "confirm", describe(report)
    assert tree["queue-backlog"]["suggestion"] != "eliminate", describe(report)
    # Over the incident: the decoy eliminated with evidence, the true cause never.
    whole = evaluation_json(watch.diagnosis.evaluate(), watch.diagnosis)
    record("diagnose.overload_whole", {"ranking": whole["ranking"]})
    tree = nodes(whole)
    assert whole["ranking"][0] == "queue-backlog", describe(whole)
    kv = tree["kv-cache-pressure"]
    assert kv["suggestion"] == "eliminate", describe(whole)
    checks = evidence(kv)
    # Eliminated with evidence: measured values on the eliminating side, not missing data.
    assert checks["kv-usage"]["outcome"] == "eliminate"
    assert checks["kv-usage"]["measured"] is not None and checks["kv-usage"]["measured"] < 0.8
    assert checks["kv-usage"]["span"]["seconds"] >= evidence_s, checks["kv-usage"]["span"]
    # "No preemption" needs a span in which the smallest rate that matters would have shown
    # ~3 events (the span rule); where the span is still too short, the check says what it
    # still needs instead of eliminating.
    preempt = checks["preemption-rate"]
    assert preempt["outcome"] == "eliminate" or (
        preempt["outcome"] == "inconclusive" and preempt["needs_more_data"]
    ), preempt
    assert tree["queue-backlog"]["suggestion"] != "eliminate", describe(whole)


def _window_s(symptom: str, check_id: str) -> int:
    """A check's window as its playbook states it."""
    for node in get_playbook(symptom).walk():
        for check in node.checks:
            if check.id == check_id:
                return check.measure.window_s
    raise LookupError(f"{symptom} has no check {check_id}")
