"""Incident loads sized from the calibration (realengine.sizing): pure, no engine.

The property the real-engine tests rely on: a load's ratio to the engine's measured
capacity does not depend on how fast the machine is. A machine twice as slow gets half
the arrival rate (or shorter outputs), never an incident that silently stops being one.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from loadgen.report import Outcome
from realengine.calibrate import Reading, calibrate, cautious, itl_quantile_ms
from realengine.sizing import (
    EngineCosts,
    Shape,
    SizingError,
    capacity,
    healthy_load,
    kv_concurrency,
    kv_pressure_load,
    output_for_service,
    overload_load,
    prefill_load,
    serving_load,
    utilisation_for_wait,
    wait_probability,
)

TINY = {"kv_tokens": 12288, "block_size": 128, "max_model_len": 1024}


def costs(step_ms: float = 10.0, per_seq: float = 0.5, prefill: float = 0.05) -> EngineCosts:
    return EngineCosts(prefill, step_ms, per_seq, **TINY)


def test_kv_concurrency_counts_whole_blocks_at_full_length():
    # 300 + 550 = 850 tokens -> 7 blocks of 128; 96 blocks hold 13 such requests.
    assert kv_concurrency(costs(), Shape((250, 350), (500, 600))) == 13
    with pytest.raises(SizingError):
        kv_concurrency(EngineCosts(0.05, 10, 0, 256, 128, 1024), Shape((300, 300), (300, 300)))


def test_capacity_is_littles_law_at_the_binding_limit():
    shape = Shape((50, 150), (100, 100))
    cap = capacity(costs(), shape, seats=8)
    assert cap.bound_by == "seats" and cap.concurrency == 8
    # service = 100 x 0.05 ms + 100 x (10 + 7 x 0.5) ms = 1.355 s
    assert cap.service_s == pytest.approx(1.355)
    assert cap.requests_per_s == pytest.approx(8 / 1.355)
    with_overhead = EngineCosts(0.05, 10.0, 0.5, **TINY, request_ms=45.0)
    assert capacity(with_overhead, shape, seats=8).service_s == pytest.approx(1.4)
    kv_bound = capacity(costs(), Shape((250, 350), (500, 600)), seats=128)
    assert kv_bound.bound_by == "kv" and kv_bound.concurrency == 13


@pytest.mark.parametrize("slowdown", [0.5, 1.0, 3.0, 8.0])
def test_load_factors_hold_whatever_the_machine_speed(slowdown):
    machine = costs(step_ms=10 * slowdown, per_seq=0.5 * slowdown, prefill=0.05 * slowdown)
    for load, factor in (
        (kv_pressure_load(machine, seats=128), 2.0),
        (overload_load(machine), 2.0),
        (healthy_load(machine, seats=128), 0.4),
    ):
        assert load.rate_per_s == pytest.approx(factor * load.capacity.requests_per_s)
        assert load.factor == factor
        assert load.shape.prompt[1] + load.shape.output[1] < TINY["max_model_len"]
        plan = load.plan(seed=1)
        assert plan and plan[-1].at_s <= load.duration_s


def test_outputs_are_sized_in_time_within_the_context():
    fast, slow = costs(step_ms=5, per_seq=0), costs(step_ms=40, per_seq=0)
    assert output_for_service(fast, (250, 350), 1, service_s=2, low=50, high=1000) == (360, 440)
    # 2 s at 40 ms is 50 tokens: the floor
    assert output_for_service(slow, (250, 350), 1, service_s=2, low=50, high=1000) == (45, 55)
    # 10 s at 5 ms would be 2,000 tokens: capped by what fits after a 350-token prompt
    _, high = output_for_service(fast, (250, 350), 1, service_s=10, low=50, high=5000)
    assert high <= 1024 - 350 - 1


def test_kv_pressure_is_kv_bound_and_overload_is_seat_bound():
    machine = costs()
    kv = kv_pressure_load(machine, seats=128)
    assert kv.capacity.bound_by == "kv" and kv.capacity.concurrency < 128
    over = overload_load(machine, seats=8)
    assert over.capacity.bound_by == "seats"
    # Few seats make KV pressure impossible; a huge seat count with big requests is not
    # plain overload: both refused rather than run as the wrong incident.
    with pytest.raises(SizingError):
        kv_pressure_load(machine, seats=4)
    with pytest.raises(SizingError):
        overload_load(EngineCosts(0.05, 10, 0.5, 1024, 128, 1024), seats=64)


def test_warmup_covers_a_service_time_on_a_slow_machine():
    slow = kv_pressure_load(costs(step_ms=200, per_seq=5), seats=128)
    assert slow.warmup_s >= slow.capacity.service_s
    assert slow.duration_s > slow.warmup_s


def test_serving_load_is_a_fraction_of_the_fixed_engines_capacity():
    shape = Shape((250, 350), (300, 340))
    load = serving_load(costs(), shape, seats=9, factor=0.5, duration_s=60)
    assert load.capacity.concurrency == 9
    assert load.rate_per_s == pytest.approx(0.5 * capacity(costs(), shape, 9).requests_per_s)


def test_a_measured_serving_rate_below_the_model_is_the_capacity():
    shape = Shape((250, 350), (300, 340))
    modelled = capacity(costs(), shape, 9).requests_per_s
    slower = serving_load(costs(), shape, seats=9, factor=0.5, duration_s=60,
                          served_per_s=modelled / 2)  # fmt: skip
    assert slower.capacity.bound_by == "measured"
    assert slower.rate_per_s == pytest.approx(0.25 * modelled)
    # A faster measurement does not raise the rate above what the model allows.
    faster = serving_load(costs(), shape, seats=9, factor=0.5, duration_s=60,
                          served_per_s=modelled * 3)  # fmt: skip
    assert faster.capacity.bound_by == "seats"
    assert faster.rate_per_s == pytest.approx(0.5 * modelled)
    with pytest.raises(SizingError):
        serving_load(costs(), shape, seats=9, factor=0.5, duration_s=60, served_per_s=0.0)


def test_calibration_measures_the_batch_slope():
    def outcome(request, step_s):
        prefill = 0.010 + request.prompt_tokens * 0.00005
        return Outcome(request.seq, request.prompt_tokens, request.max_tokens, 0, 0.0,
                       status="ok", ttft_s=prefill,
                       e2e_s=prefill + step_s * (request.max_tokens - 1),
                       output_tokens=request.max_tokens)  # fmt: skip

    def send(request):
        return outcome(request, 0.004)

    def send_batch(requests):  # 4 ms + 0.5 ms per further sequence
        return [outcome(r, 0.004 + 0.0005 * (len(requests) - 1)) for r in requests]

    measured = calibrate(send, repeats=3, decode_tokens=16, send_batch=send_batch, batch=8)
    assert measured.decode_step_ms == pytest.approx(4.0)
    assert measured.batch_step_ms[8] == pytest.approx(7.5)
    assert measured.decode_step_ms_per_seq == pytest.approx(0.5)
    assert measured.request_ms == pytest.approx(10.0)  # the TTFT intercept
    assert measured.slowest_step_ms == {1: pytest.approx(4.0), 8: pytest.approx(7.5)}
    served = cautious(costs(step_ms=4.0, per_seq=0.5), measured)
    assert served.decode_step_ms == pytest.approx(7.5)  # the slowest step seen, at any batch
    assert served.decode_step_ms_per_seq == 0.5
    assert calibrate(send, repeats=1, decode_tokens=4).decode_step_ms_per_seq == 0.0


def test_calibration_reads_the_engines_own_clock_when_metered():
    """A client that is descheduled reads a whole stream at once (its decode step reads
    ~0); the engine's histograms, read before and after each probe, are what count."""
    totals = {"ttft": [0.0, 0.0], "itl": [0.0, 0.0]}
    booked = []  # observations the engine books only after the stream ended (one late read)

    bounds = (0.01, 0.025, 0.05, 0.1, math.inf)
    itl = dict.fromkeys(bounds, 0.0)

    def meter():
        while booked:
            key, value = booked.pop()
            totals[key][0] += value
            totals[key][1] += 1
            if key == "itl":
                for le in bounds:
                    itl[le] += value <= le
        return Reading({k: (s, c) for k, (s, c) in totals.items()}, tuple(itl.items()))

    def engine(request, step_s):
        ttft = 0.040 + request.prompt_tokens * 0.00005
        booked.append(("ttft", ttft))
        booked.extend(("itl", step_s) for _ in range(request.max_tokens - 1))
        # the client saw everything at once: e2e == ttft
        return Outcome(request.seq, request.prompt_tokens, request.max_tokens, 0, 0.0,
                       status="ok", ttft_s=1.0, e2e_s=1.0,
                       output_tokens=request.max_tokens)  # fmt: skip

    def send_batch(requests):
        return [engine(r, 0.015 + 0.0005 * (len(requests) - 1)) for r in requests]

    measured = calibrate(lambda r: engine(r, 0.015), repeats=3, decode_tokens=16,
                         send_batch=send_batch, batch=16, meter=meter)  # fmt: skip
    assert measured.decode_step_ms == pytest.approx(15.0)
    assert measured.batch_step_ms[16] == pytest.approx(22.5)
    assert measured.prefill_ms_per_token == pytest.approx(0.05)
    assert measured.request_ms == pytest.approx(40.0)
    # 16 x 15 streams at 22.5 ms, all in the (0.01, 0.025] bucket
    assert 10 < measured.batch_itl_p99_ms <= 25


def test_itl_quantile_is_of_the_observations_between_two_readings():
    before = Reading({}, ((0.05, 90.0), (0.1, 100.0), (math.inf, 100.0)))
    after = Reading({}, ((0.05, 90.0), (0.1, 190.0), (math.inf, 200.0)))
    # of the 100 new observations, 90 in (0.05, 0.1] and 10 above: p50 inside that bucket
    assert itl_quantile_ms(before, after, 0.5) == pytest.approx(50 + 50 * 50 / 90)
    assert itl_quantile_ms(after, after, 0.5) is None  # nothing new
    assert itl_quantile_ms(Reading({}, ((1.0, 1.0),)), after, 0.5) is None  # other bounds


@pytest.mark.parametrize("slowdown", [0.5, 1.0, 4.0])
def test_prefill_incident_ceiling_separates_a_chunk_from_a_whole_prompt(slowdown):
    machine = EngineCosts(0.05 * slowdown, 15 * slowdown, 0.5 * slowdown, kv_tokens=12288,
                          block_size=128, max_model_len=2048)  # fmt: skip
    incident = prefill_load(machine)
    assert incident.step_with_chunk_ms < incident.itl_ceiling_ms < incident.step_with_prompt_ms
    # Three unfixed steps in a hundred carry a whole prompt (what a p99 ITL must see),
    # whatever the machine's speed, and the fixed engine keeps up: a prompt costs it its
    # prefill and a decode step for each of its chunks (a 1,900-token prompt is 8 of 256).
    step = machine.step_ms(8)
    assert incident.prompt_step_share == pytest.approx(0.03)
    rate = incident.prefill.rate_per_s
    decode_busy = incident.decode.rate_per_s * machine.prefill_ms_per_token * 48 / 1000
    steps = rate + (1 - decode_busy - rate * incident.prompt_cost_unfixed_ms / 1000) * 1000 / step
    assert rate / steps == pytest.approx(0.03, rel=1e-4)
    fixed_cost = machine.prefill_ms_per_token * 1750 + 8 * step
    assert incident.prompt_cost_fixed_ms == pytest.approx(fixed_cost)
    busy = decode_busy + rate * fixed_cost / 1000
    assert incident.busy_fixed == pytest.approx(busy) and busy <= 0.7
    assert incident.busy_unfixed < incident.busy_fixed
    # the decode streams keep eight requests in flight (Little's law)
    flight = incident.decode.rate_per_s * incident.decode.capacity.service_s
    assert flight == pytest.approx(8)
    plan = incident.plan(seed=1)
    assert {r.prompt_tokens >= 1600 for r in plan} == {True, False}
    with pytest.raises(SizingError):
        prefill_load(costs())  # max-model-len 1024: a 1,900-token prompt does not fit


def test_prefill_rate_counts_the_per_request_cost_and_what_a_burst_measured():
    """2026-12-07: prompts sized from bare prefill (12 a second, a "0.4 share") left out
    the ~9 ms each request costs and the decode step each chunk rides on; the unfixed
    engine queued (p95 TTFT 4.6 s) and the chunking one fell behind (p99 ITL 123 ms)."""
    bare = EngineCosts(0.027, 3.6, 0.074, kv_tokens=12288, block_size=128, max_model_len=2048)
    with_requests = dataclasses.replace(bare, request_ms=9.0)
    plain, costed = prefill_load(bare), prefill_load(with_requests)
    assert costed.prompt_cost_unfixed_ms == pytest.approx(9 + 0.027 * 1750 + bare.step_ms(8))
    # Dearer prompts, fewer of them for the same share of steps.
    assert costed.prefill.rate_per_s < plain.prefill.rate_per_s
    # A burst measured slower than the model: the measured cost rules, both engines.
    measured = prefill_load(with_requests, prompt_served_ms=90.0)
    assert measured.prompt_cost_unfixed_ms == 90.0
    assert measured.prompt_cost_fixed_ms == pytest.approx(90 + 7 * bare.step_ms(8))
    assert measured.prefill.rate_per_s < costed.prefill.rate_per_s
    # ... and never faster than the model.
    assert prefill_load(with_requests, prompt_served_ms=1.0) == costed
    # Decode steps slower under the streams' load than idle: every chunk rides on one.
    loaded = prefill_load(with_requests, prompt_served_ms=90.0, loaded_step_ms=8.0)
    assert loaded.prompt_cost_fixed_ms == pytest.approx(90 + 7 * 8.0)
    assert prefill_load(with_requests, prompt_served_ms=90.0, loaded_step_ms=0.5) == measured
    with pytest.raises(SizingError):
        prefill_load(with_requests, fixed_busy_max=1.2)


def test_the_fixed_engine_keeping_up_caps_the_rate_and_too_few_prompt_steps_are_refused():
    """Dear prompts among cheap steps: three steps in a hundred would keep the chunking
    engine busier than 0.7, so the rate is what 0.7 allows, while that still gives a p99
    two steps in a hundred; 1 ms steps among 100 ms prompts cannot, and are refused."""
    dear = EngineCosts(0.04, 2.0, 0.1, kv_tokens=12288, block_size=128, max_model_len=2048)
    capped = prefill_load(dear, prompt_served_ms=150.0)
    assert capped.busy_fixed == pytest.approx(0.7)
    assert 0.02 <= capped.prompt_step_share < 0.03
    fast_steps = EngineCosts(0.057, 1.0, 0.0, kv_tokens=12288, block_size=128, max_model_len=2048)
    with pytest.raises(SizingError, match="p99"):
        prefill_load(fast_steps)


def test_prefill_ceiling_stays_above_the_machines_own_tail():
    """The machine's tail (p99 ITL with no prefill) adds to what a step's prefill costs:
    a fixed engine's p99 is its tail plus a chunk, an unfixed one's its tail plus a
    prompt, and the ceiling sits between those two (a 2-core run: tail 20 ms, chunk 7,
    prompt 47; p99 25-34 ms fixed against a 30 ms ceiling set between the bare steps)."""
    machine = EngineCosts(0.05, 15, 0.5, kv_tokens=12288, block_size=128, max_model_len=2048)
    plain = prefill_load(machine)
    chunk, prompt = 0.05 * 256, 0.05 * 1750  # 12.8 and 87.5 ms
    # A tail under the bare steps' own costs changes nothing.
    assert prefill_load(machine, tail_floor_ms=10).itl_ceiling_ms == plain.itl_ceiling_ms
    raised = prefill_load(machine, tail_floor_ms=40)
    assert raised.itl_ceiling_ms == pytest.approx(math.sqrt((40 + chunk) * (40 + prompt)))
    assert raised.itl_ceiling_ms > 40 + chunk and raised.itl_ceiling_ms < 40 + prompt
    with pytest.raises(SizingError):  # 1.5x a tail that hides the whole-prompt step
        prefill_load(machine, tail_floor_ms=400)


def test_a_fixed_engine_whose_tail_is_over_the_bare_steps_middle_still_fits_the_ceiling():
    """The 2-core run's numbers: chunk step 11 ms, prompt step 51 ms, tail 20 ms. Between
    the bare steps the bound would be 25 ms, under the fixed engine's own 27 ms (tail +
    chunk); between the tails it is 50 ms, which the counts decide on both sides."""
    machine = EngineCosts(0.0272, 3.6, 0.074, kv_tokens=12288, block_size=128,
                          max_model_len=2048)  # fmt: skip
    incident = prefill_load(machine, tail_floor_ms=20.3, itl_bounds_ms=VLLM_ITL_BOUNDS_MS)
    assert incident.itl_ceiling_ms == 50
    assert incident.itl_ceiling_ms > 20.3 + 0.0272 * 256 + 10  # room over the fixed tail


VLLM_ITL_BOUNDS_MS = (10, 25, 50, 75, 100, 150, 200, 300, 400, 500, 750, 1000, 2500)


@pytest.mark.parametrize("slowdown", [0.5, 1.0, 4.0])
def test_prefill_ceiling_sits_on_a_bucket_bound_the_histogram_can_decide(slowdown):
    """With vLLM's ITL bounds the ceiling is one of them, inside the middle third (log
    scale) of a chunk step and a whole-prompt step, at any machine speed."""
    machine = EngineCosts(0.05 * slowdown, 15 * slowdown, 0.5 * slowdown, kv_tokens=12288,
                          block_size=128, max_model_len=2048)  # fmt: skip
    incident = prefill_load(machine, itl_bounds_ms=VLLM_ITL_BOUNDS_MS)
    chunk, prompt = incident.step_with_chunk_ms, incident.step_with_prompt_ms
    third = (prompt / chunk) ** (1 / 3)
    assert incident.itl_ceiling_ms in VLLM_ITL_BOUNDS_MS
    assert chunk * third < incident.itl_ceiling_ms < prompt / third


def test_without_a_bound_in_the_middle_third_one_near_either_tail_still_serves():
    """A CI run: the fixed engine read a p99 of 38.9 ms in the 25-50 ms bucket against a
    42 ms geometric ceiling, no bound in the middle third (37-47 ms here), and the
    verification could not decide. A bound a tenth clear of both tails (50 ms, under the
    unfixed 59 ms) is decided by the counts."""
    machine = EngineCosts(0.02, 3.0, 0.05, kv_tokens=12288, block_size=128,
                          max_model_len=2048)  # fmt: skip
    incident = prefill_load(machine, tail_floor_ms=24, itl_bounds_ms=VLLM_ITL_BOUNDS_MS)
    chunk, prompt = 0.02 * 256, 0.02 * 1750
    fixed, unfixed = 24 + chunk, 24 + prompt
    third = (unfixed / fixed) ** (1 / 3)
    assert not any(fixed * third < b < unfixed / third for b in VLLM_ITL_BOUNDS_MS)
    assert incident.itl_ceiling_ms == 50
    assert fixed * 1.1 < incident.itl_ceiling_ms < unfixed / 1.1
    # No bound near either tail: the geometric middle stands.
    sparse = prefill_load(machine, tail_floor_ms=24, itl_bounds_ms=(25, 75))
    assert sparse.itl_ceiling_ms == pytest.approx(math.sqrt(fixed * unfixed))


def test_decidable_threshold_is_the_nearest_bound_in_range_or_none():
    from deployments.calibration import decidable_threshold

    # The 2026-12-03 machine: a chunk step of 7.5 ms, a whole prompt of 40 ms.
    assert decidable_threshold(17.3, VLLM_ITL_BOUNDS_MS, 10.5, 28.6) == 25
    assert decidable_threshold(88.6, VLLM_ITL_BOUNDS_MS, 65, 121) == 100
    assert decidable_threshold(60, VLLM_ITL_BOUNDS_MS, 51, 74) is None  # no bound inside
    assert decidable_threshold(10, (float("inf"), float("nan"), -5, 0), 0, 1e9) is None
    assert decidable_threshold(0, VLLM_ITL_BOUNDS_MS, 0, 1e9) is None
    # Equally far on a log scale: the lower bound (the stricter ceiling).
    assert decidable_threshold(50, (25, 100), 0, 1e9) == 25


def test_without_a_bound_in_range_the_ceiling_stays_geometric():
    machine = EngineCosts(0.05, 15, 0.5, kv_tokens=12288, block_size=128, max_model_len=2048)
    plain = prefill_load(machine)
    assert prefill_load(machine, itl_bounds_ms=(1, 10_000)).itl_ceiling_ms == plain.itl_ceiling_ms


def test_erlang_c_matches_the_textbook_formula():
    def textbook(c: int, a: float) -> float:
        top = a**c / math.factorial(c) * c / (c - a)
        return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)

    for seats, utilisation in ((1, 0.5), (9, 0.5), (9, 0.38), (18, 0.9), (40, 0.7)):
        assert wait_probability(seats, utilisation) == pytest.approx(
            textbook(seats, utilisation * seats), rel=1e-9
        )
    assert wait_probability(1, 0.5) == pytest.approx(0.5)  # M/M/1: P(wait) = rho
    assert wait_probability(9, 0.0) == 0.0
    # Large seat counts stay finite (the factorials alone would overflow a float).
    assert 0 < wait_probability(2000, 0.99) < 1
    with pytest.raises(SizingError):
        wait_probability(9, 1.0)


def test_the_wait_share_lowers_the_verification_rate_to_what_meets_it():
    assert wait_probability(9, 0.5) > 0.04  # why half of nine seats is not enough
    rho = utilisation_for_wait(9, 0.01)
    assert wait_probability(9, rho) <= 0.01 < wait_probability(9, rho + 1e-3)
    shape = Shape((250, 350), (300, 340))
    modelled = capacity(costs(), shape, 9).requests_per_s
    load = serving_load(costs(), shape, seats=9, factor=0.5, duration_s=60, wait_share=0.01)
    assert load.factor == pytest.approx(rho) and load.rate_per_s == pytest.approx(rho * modelled)
    # More seats at the same utilisation wait less: the factor stays where it was asked.
    wide = serving_load(costs(), shape, seats=60, factor=0.5, duration_s=60, wait_share=0.01)
    assert wide.factor == 0.5
    with pytest.raises(SizingError):
        utilisation_for_wait(9, 0.0)
