"""Long prompts in big prefill steps on a real vLLM: p99 ITL over the ceiling, diagnosed as
``oversized-prefill-chunks``; the fix (a smaller ``--max-num-batched-tokens``) applied by
the engine controller and verified under the same arrival process; unfixed, it fails.

Sized from a calibration of the engine under test (``realengine.sizing.prefill_load``):
eight decode streams, and long prompts (1,600-1,900 tokens) on three of the unfixed
engine's steps in a hundred, keeping the chunking engine 70 % busy at most. Each prompt
costs what bursts of them measured with the decode streams running, and on the fixed
engine a decode step (at its loaded cost) for every further chunk: both engines keep up,
so the p99 ITL reads the steps' composition, not a backlog. The ITL ceiling lies halfway
between the p99 of an engine whose steps carry one 256-token chunk (the deployment's
intended budget) and one whose steps carry a whole long prompt, which vLLM's CPU default
of 2,048 batched tokens lets into a single step (each a step's cost on top of the
machine's own ITL tail), moved to the nearest bound of the engine's ITL buckets in
between: the p99 is then decided by the bucket counts (a ceiling of 15 ms inside the
10-25 ms bucket left fixed engines "reading" 21-25 ms, a guess).
"""

from __future__ import annotations

import time

import pytest

from deployments import budget as b
from deployments.budget import Budget
from realengine import EngineFlags
from realengine.calibrate import (
    batch_sender,
    cautious,
    engine_meter,
    itl_bounds_ms,
    mean_ms,
    served_per_s,
    tiny_budget,
)
from realengine.controller import apply_fix
from realengine.sizing import prefill_load
from tests.realengine.conftest import calibrate_engine, keep_scrape, record, ttft_target_ms
from tests.realengine.incidents import Load, describe, diagnose, evidence, nodes, write_budget
from tests.realengine.verifying import MachineShare, Poller, criteria, judge, scaled_fix

UNFIXED = EngineFlags(max_model_len=2048, max_num_batched_tokens=2048)
LONG_PROMPT_MEAN = 1750  # prefill_load's long prompts are 1,600-1,900 tokens
DECODE_STREAMS = 8  # prefill_load's decode streams
# Other processes' CPU over the fixed window beyond which its ITL tail is the machine's:
# a quarter of this 2-core machine (a quiet one reads ~0.05; two busy neighbours ~2).
SHARED_CORES = 0.5
# Long prompts sent at once, a few bursts, while the incident's decode streams run: the
# slowest burst tells what one costs the engine with its API server streaming the decodes'
# tokens (the idle calibration sends one request at a time, and a burst on an idle engine
# read 82-96 ms a prompt against ~80 modelled, while the same decodes alone kept 1.9 of the
# machine's 2 cores busy and the sized mix queued: p95 TTFT 9 s unfixed, 19 s fixed).
BURST, BURSTS = 6, 3
DECODES_S = 8.0  # the decode streams' share of the probe: settle, meter, burst


def _under_decodes(engine, incident) -> dict:
    """Milliseconds per long prompt (slowest of ``BURSTS`` bursts) and the engine's mean
    ITL, both measured while the incident's decode streams run."""
    plan = [r for r in incident.decode.plan(seed=5) if r.at_s < DECODES_S]
    load = Load(plan, engine.url, deadline_s=DECODES_S + 30, seed=5).start()
    meter = engine_meter(engine.metrics_url)
    time.sleep(2.0)  # the streams are in
    before = meter()
    time.sleep(2.0)
    step_ms = mean_ms(before, meter(), "itl", 100)
    send = batch_sender(engine.url, "tiny-llama")
    rates = [served_per_s(send, prompt=LONG_PROMPT_MEAN, output=4, seats=BURST,
                          first_seq=2_000_000 + i * BURST) for i in range(BURSTS)]  # fmt: skip
    load.join()
    return {"prompt_served_ms": 1000 / min(rates), "loaded_step_ms": step_ms}


def _p99_ms(result) -> float | None:
    by_title = {c.title: c for c in result.criteria}
    p99 = next((c for t, c in by_title.items() if t.startswith("p99 ITL")), None)
    return None if p99 is None or p99.measured is None else round(p99.measured * 1000, 1)


def test_oversized_prefill_chunks_diagnosed_fixed_and_verified(engines, tmp_path):
    engine = engines.serve(UNFIXED)
    calibration, costs = calibrate_engine(engine, "calibration.prefill", long=LONG_PROMPT_MEAN)
    bounds = itl_bounds_ms(engine_meter(engine.metrics_url))
    loaded = _under_decodes(engine, prefill_load(costs, decode_streams=DECODE_STREAMS))
    record("under_decodes.prefill", loaded)
    incident = prefill_load(
        costs,
        decode_streams=DECODE_STREAMS,
        **loaded,
        tail_floor_ms=calibration.batch_itl_p99_ms,
        itl_bounds_ms=bounds,
    )
    constants = tiny_budget(
        calibration, kv_tokens=costs.kv_tokens, max_num_seqs=128,
        max_num_batched_tokens=incident.intended_chunk,
        ttft_target_ms=ttft_target_ms(calibration),
        itl_ceiling_ms=round(incident.itl_ceiling_ms, 1),
    )  # fmt: skip
    # The decode step as the team would measure it: at the batch this deployment runs
    # (eight streams), at its slowest. The one-sequence step (3.6 ms) against a batch's
    # 4.7-6.5 ms put the mixed-step ceiling under what a fixed engine's steps cost (mean
    # ITL 13.3 ms against 1.25 x 10.55).
    batch_step = cautious(costs, calibration).step_ms(DECODE_STREAMS)
    constants["decode_step_ms"] = round(batch_step, 3)
    budget = Budget(**constants)
    record("load.prefill", incident.as_dict())
    # The ceiling is meaningful for this engine: the intended chunk fits, 2,048 tokens do not.
    assert b.mixed_step_ceiling_ms(budget) < budget.itl_ceiling_ms
    assert b.mixed_step_ceiling_ms(budget, 2048) > budget.itl_ceiling_ms
    path = write_budget(tmp_path, "prefill", constants)
    record("budget.prefill", constants)
    plan = incident.plan(seed=21)
    run_s = incident.duration_s

    with Poller("itl-spikes", budget, engine.metrics_url, max_s=run_s + 120) as unfixed:
        load = Load(plan, engine.url, deadline_s=run_s + 60, seed=21).start()
        time.sleep(incident.warmup_s)
        # 15 s between the two polls: the p99 must see the ~2 % of steps that carry a prompt
        report = diagnose("itl-spikes", engine.metrics_url, path, interval_s=15.0,
                          log_file=engine.log_path)  # fmt: skip
        keep_scrape("prefill-unfixed", engine.metrics_url)
        load.join()
    record("diagnose.prefill", {"ranking": report["ranking"], "fix": report["fix"],
                                "alarm": report["alarm"]})  # fmt: skip
    assert report["alarm"]["firing"] is True, describe(report)
    assert report["ranking"][0] == "oversized-prefill-chunks", describe(report)
    assert report["root_cause"] == "oversized-prefill-chunks", describe(report)
    # V1 has no per-step histogram: its "iteration tokens" count each prompt whole at its
    # first token. With the budget the engine was started with (2,048 against 256: 0.32
    # names it only among its arguments, ``non-default args``), its batches of 1,600-1,900
    # tokens are steps that big: confirmed.
    checks = evidence(nodes(report)["oversized-prefill-chunks"])
    assert checks["tokens-per-step-p99"]["measured"] is None, describe(report)
    assert checks["engine-chunk-budget"]["measured"] == 2048, describe(report)
    assert checks["output-batch-p99"]["outcome"] == "confirm", describe(report)
    fix = report["fix"]
    assert fix["apply"]["max_num_batched_tokens"] <= incident.intended_chunk

    scaled = scaled_fix("itl-spikes", "oversized-prefill-chunks", window_s=int(run_s))
    left_alone = judge(scaled, budget, unfixed, fix["parameters"])
    record("verify.prefill.unfixed", criteria(left_alone))
    assert left_alone.state == "failing", criteria(left_alone)

    applied = apply_fix(engine, fix["apply"])  # the engine controller: restart with the fix
    record("restart_s.prefill_fix", round(applied.restart_s, 1))
    assert applied.after.max_num_batched_tokens == fix["apply"]["max_num_batched_tokens"]
    # The machine's load drifts over minutes: what a step costs now, with nothing else
    # running, is what the fixed engine's tail is measured against.
    fixed_calibration, _ = calibrate_engine(engine, "calibration.prefill_fixed")
    share = MachineShare(engine.process.pid)
    with Poller("itl-spikes", budget, engine.metrics_url, max_s=run_s + 120) as fixed:
        Load(plan, engine.url, deadline_s=run_s + 60, seed=21).start().join()
    machine = share.report()
    record("verify.prefill.machine", machine)
    keep_scrape("prefill-fixed", engine.metrics_url)
    verdict = judge(scaled, budget, fixed, fix["parameters"])
    record("verify.prefill.fixed", criteria(verdict))
    chunk = int(fix["apply"]["max_num_batched_tokens"])
    # The fix took effect: the restarted engine says it chunks at the new budget.
    assert f"Chunked prefill is enabled with max_num_batched_tokens={chunk}." in engine.log_tail(
        1 << 20
    )
    # The same long prompts on the fixed engine read as many "tokens per step" as before
    # (V1 counts them whole): the engine's own budget line rules the cause out.
    after = diagnose("itl-spikes", engine.metrics_url, path, cycles=1, log_file=engine.log_path)
    record("diagnose.prefill_fixed", {"ranking": after["ranking"]})
    fixed_checks = evidence(nodes(after)["oversized-prefill-chunks"])
    assert fixed_checks["engine-chunk-budget"]["outcome"] == "eliminate", describe(after)
    assert nodes(after)["oversized-prefill-chunks"]["suggestion"] == "eliminate", describe(after)
    assert verdict.state in ("passing", "failing"), criteria(verdict)  # the window elapsed
    if verdict.state != "passing":
        floor = fixed_calibration.batch_itl_p99_ms
        ceiling = budget.itl_ceiling_ms
        numbers = (
            f"ceiling {ceiling:.0f} ms; unfixed p99 {_p99_ms(left_alone)} ms, fixed p99 "
            f"{_p99_ms(verdict)} ms; a step with one {chunk}-token chunk should cost "
            f"{incident.step_with_chunk_ms:.0f} ms, with a whole prompt "
            f"{incident.step_with_prompt_ms:.0f} ms; p99 ITL of sixteen decodes and no "
            f"prefill at all, just before: {floor and round(floor)} ms"
        )
        if floor is not None and floor >= ceiling:
            # Physics of a shared CPU: the OS deschedules the engine for longer than any
            # step costs, so the tail is set by the machine, not by the chunk budget.
            pytest.xfail(f"the machine's own ITL tail is over the ceiling: {numbers}")
        if machine["other_cores"] > SHARED_CORES:
            # The same, measured over the window itself rather than just before it: other
            # work held a core's share while the fixed engine's tail was being read.
            pytest.xfail(f"other work took {machine['other_cores']} cores over the window: "
                         f"{numbers}; {machine}")  # fmt: skip
        # The machine could have met the ceiling and the fixed engine did not: the fix
        # failed its verification, which is what this incident exists to catch.
        pytest.fail(f"the applied fix did not verify: {numbers}; {criteria(verdict)}")
