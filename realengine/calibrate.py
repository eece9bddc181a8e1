"""Measure a real engine's budget constants on an idle engine: prefill cost per token and
the decode step, the two numbers the playbooks' arithmetic is built on.

A CPU vLLM is orders of magnitude slower than the Atlas deployment the seed describes,
so its deployments must carry constants measured on it, never Atlas's. Prefill cost is
the slope of TTFT over prompt length (one request at a time, one output token, so
neither queueing nor batching is in it); the decode step is a single stream's decode
time per token, (e2e - TTFT) / (tokens - 1). Not the median gap between chunks: on a busy
machine the server's events reach the client in bunches, and most gaps read as ~0.
Medians over repeats keep a busy machine's hiccups out.

A batch of streams decoding together gives the step's cost per further sequence (the
slope of step time over batch size), and the engine's own ``cache_config_info`` (read
with the product's parser) its KV capacity and block size: together what
``realengine.sizing`` needs to size each incident's load against this engine, measured in
the same run.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from loadgen.client import run_plan
from loadgen.plan import PlannedRequest
from loadgen.report import Outcome
from probes.parsing.engine import engine_signals
from probes.parsing.exposition import parse_exposition
from probes.parsing.windowed import bucket_quantile
from realengine.cpu import DTYPE_BYTES, machine_dtype
from realengine.model import TINY_LLAMA, kv_bytes_per_token
from realengine.sizing import EngineCosts

GIB = 1024**3


class CalibrationError(RuntimeError):
    """The engine did not answer the calibration requests."""


@dataclass(frozen=True)
class Calibration:
    prefill_ms_per_token: float
    decode_step_ms: float
    idle_ttft_ms: dict[int, float]  # median TTFT by prompt length
    batch_step_ms: dict[int, float] = field(default_factory=dict)  # median step by batch size
    # The engine's p99 ITL while only the batch decoded (worst round): the tail a step has
    # on this machine with no prefill at all, what no chunk budget can go below.
    batch_itl_p99_ms: float | None = None
    # The slowest repeat at each batch size: a shared machine's speed moves by 2-3x within
    # minutes (one afternoon read 7, 15 and 24 ms single-stream steps), and a load that must
    # be *served* is sized against the slowest step seen, not the median.
    slowest_step_ms: dict[int, float] = field(default_factory=dict)

    @property
    def decode_step_ms_per_seq(self) -> float:
        """Step cost of each further sequence in a batch: the slope from one stream to the
        largest batch measured (0 when none was, or when batching measured cheaper)."""
        if not self.batch_step_ms:
            return 0.0
        batch = max(self.batch_step_ms)
        if batch <= 1:
            return 0.0
        return max(0.0, (self.batch_step_ms[batch] - self.decode_step_ms) / (batch - 1))

    @property
    def request_ms(self) -> float:
        """What a request costs whatever its length: the intercept of idle TTFT over prompt
        length (HTTP, input processing, scheduling), at least 0."""
        if not self.idle_ttft_ms:
            return 0.0
        short = min(self.idle_ttft_ms)
        return max(0.0, self.idle_ttft_ms[short] - short * self.prefill_ms_per_token)

    def as_dict(self) -> dict:
        return {
            "prefill_ms_per_token": self.prefill_ms_per_token,
            "request_ms": self.request_ms,
            "decode_step_ms": self.decode_step_ms,
            "decode_step_ms_per_seq": self.decode_step_ms_per_seq,
            "idle_ttft_ms": {str(k): v for k, v in self.idle_ttft_ms.items()},
            "batch_step_ms": {str(k): v for k, v in self.batch_step_ms.items()},
            "batch_itl_p99_ms": self.batch_itl_p99_ms,
            "slowest_step_ms": {str(k): v for k, v in self.slowest_step_ms.items()},
        }


Sender = Callable[[PlannedRequest], Outcome]
BatchSender = Callable[[list[PlannedRequest]], list[Outcome]]


def http_sender(url: str, model: str, *, seed: int = 7) -> Sender:
    def send(request: PlannedRequest) -> Outcome:
        (outcome,) = run_plan(
            [request], url, model=model, seed=seed, request_timeout_s=120
        ).outcomes
        return outcome

    return send


def batch_sender(url: str, model: str, *, seed: int = 7) -> BatchSender:
    def send(requests: list[PlannedRequest]) -> list[Outcome]:
        return run_plan(requests, url, model=model, seed=seed, request_timeout_s=300).outcomes

    return send


@dataclass(frozen=True)
class Reading:
    """One read of the engine's own histograms: (sum in seconds, count) per key, and the
    ITL histogram's cumulative buckets ``(le, count)``."""

    sums: Mapping[str, tuple[float, float]]
    itl_buckets: tuple[tuple[float, float], ...] = ()


Meter = Callable[[], Reading]
METER_TRIES = 20


def _scrape(metrics_url: str) -> bytes:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:  # noqa: S310 - loopback
        return response.read(8 << 20)


def engine_meter(metrics_url: str) -> Meter:
    """The engine's own TTFT and ITL histograms (sum, count), read by the product's parser.

    Measured by the engine, not by the client: on a busy machine a client that is not
    scheduled for a while reads a whole stream at once, and its timings say nothing about
    the engine (one calibration read a 0.17 ms decode step that way, where the engine's
    ITL histogram said 15 ms)."""

    def read() -> Reading:
        signals = engine_signals(parse_exposition(_scrape(metrics_url)))
        sums = {}
        for key in ("ttft", "itl"):
            h = signals.histograms.get(key)
            if h is not None and h.sum is not None and h.count is not None:
                sums[key] = (h.sum, h.count)
        itl = signals.histograms.get("itl")
        return Reading(sums, itl.buckets if itl is not None else ())

    return read


def itl_bounds_ms(meter: Meter) -> tuple[float, ...]:
    """The engine's own ITL bucket bounds in ms (finite ones): where a ceiling can sit
    for its p99 to be decided by the counts (``deployments.calibration``)."""
    return tuple(le * 1000 for le, _ in meter().itl_buckets if math.isfinite(le))


def mean_ms(before: Reading, after: Reading, key: str, expect: int) -> float | None:
    """Mean of the ``key`` observations between two readings in ms; None until at least
    ``expect`` new ones are in (the engine books a stream's last tokens as it ends)."""
    s0, c0 = before.sums.get(key, (0.0, 0.0))
    if key not in after.sums:
        return None
    s1, c1 = after.sums[key]
    if c1 - c0 < expect:
        return None
    return (s1 - s0) * 1000 / (c1 - c0)


def itl_quantile_ms(before: Reading, after: Reading, q: float) -> float | None:
    """The ITL quantile of what the engine observed between two readings (ms); None when
    the bucket bounds differ or nothing was observed."""
    if not after.itl_buckets or [b for b, _ in before.itl_buckets] not in (
        [],
        [b for b, _ in after.itl_buckets],
    ):
        return None
    start = dict(before.itl_buckets)
    delta = [(le, count - start.get(le, 0.0)) for le, count in after.itl_buckets]
    if delta[-1][1] <= 0:
        return None
    value = bucket_quantile(q, delta)
    return value * 1000 if math.isfinite(value) else None


def _metered(meter: Meter, action: Callable[[], object], key: str, expect: int,
             readings: list[Reading] | None = None) -> float:  # fmt: skip
    before = meter()
    action()
    for _ in range(METER_TRIES):
        after = meter()
        value = mean_ms(before, after, key, expect)
        if value is not None:
            if readings is not None:
                readings += [before, after]
            return value
        time.sleep(0.1)
    raise CalibrationError(f"the engine booked fewer than {expect} {key} observations")


def _client_step_ms(outcome: Outcome) -> float:
    _check(outcome, "decode")
    if outcome.output_tokens < 2:
        raise CalibrationError("decode probe returned fewer than two tokens")
    assert outcome.e2e_s is not None and outcome.ttft_s is not None
    return (outcome.e2e_s - outcome.ttft_s) * 1000 / (outcome.output_tokens - 1)


def _check(outcome: Outcome, what: str) -> None:
    if outcome.status != "ok" or outcome.ttft_s is None or outcome.e2e_s is None:
        raise CalibrationError(f"{what} probe failed: {outcome.error}")


def calibrate(
    send: Sender,
    *,
    short: int = 32,
    long: int = 768,
    repeats: int = 5,
    decode_tokens: int = 64,
    send_batch: BatchSender | None = None,
    batch: int = 16,
    batch_repeats: int = 3,
    meter: Meter | None = None,
) -> Calibration:
    """Idle calibration: ``repeats`` one-token requests at each prompt length, then one
    single stream of ``decode_tokens`` tokens per repeat, then (with ``send_batch``)
    ``batch_repeats`` rounds of ``batch`` streams decoding together.

    With ``meter`` every number is the engine's own (TTFT and ITL histograms read before
    and after each probe); without it, the client's clock (tests without an engine)."""
    seq = 0
    ttfts: dict[int, list[float]] = {short: [], long: []}
    for _ in range(repeats):
        for length in (short, long):
            request = PlannedRequest(seq, 0.0, length, 1)
            seq += 1
            if meter is not None:
                ttfts[length].append(
                    _metered(meter, lambda r=request: _check(send(r), "prefill"), "ttft", 1)
                )
                continue
            outcome = send(request)
            _check(outcome, "prefill")
            assert outcome.ttft_s is not None
            ttfts[length].append(outcome.ttft_s * 1000)
    steps: list[float] = []
    for _ in range(repeats):
        request = PlannedRequest(seq, 0.0, short, decode_tokens)
        seq += 1
        if meter is not None:
            steps.append(_metered(meter, lambda r=request: _check(send(r), "decode"), "itl",
                                  decode_tokens - 1))  # fmt: skip
        else:
            steps.append(_client_step_ms(send(request)))
    medians = {k: statistics.median(v) for k, v in ttfts.items()}
    slope = (medians[long] - medians[short]) / (long - short)
    single = statistics.median(steps)
    batches = {1: single}
    slowest = {1: max(steps)}
    if send_batch is not None and batch > 1:
        rounds: list[float] = []
        readings: list[Reading] = []
        for _ in range(batch_repeats):
            plan = [PlannedRequest(seq + i, 0.0, short, decode_tokens) for i in range(batch)]
            seq += batch

            def run(plan: list[PlannedRequest] = plan) -> None:
                for outcome in send_batch(plan):
                    _check(outcome, "batch decode")

            if meter is not None:
                rounds.append(_metered(meter, run, "itl", batch * (decode_tokens - 1), readings))
            else:
                outcomes = send_batch(plan)
                rounds.append(statistics.median(_client_step_ms(o) for o in outcomes))
        batches[batch] = statistics.median(rounds)
        slowest[batch] = max(rounds)
        p99s = [itl_quantile_ms(readings[i], readings[i + 1], 0.99)
                for i in range(0, len(readings), 2)]  # fmt: skip
        floor = [v for v in p99s if v is not None]
        return Calibration(max(slope, 1e-4), single, medians, batches,
                           batch_itl_p99_ms=max(floor) if floor else None,
                           slowest_step_ms=slowest)  # fmt: skip
    return Calibration(max(slope, 1e-4), single, medians, batches, slowest_step_ms=slowest)


def served_per_s(
    send_batch: BatchSender, *, prompt: int, output: int, seats: int, first_seq: int = 1_000_000
) -> float:
    """Requests a second the engine serves of one shape with ``seats`` running, measured:
    ``seats`` requests sent at once, divided by the time the last one took (client clock).

    Why not only the idle calibration: its steps come from a batch of sixteen short streams,
    and a busy engine's per-sequence cost need not stay linear beyond that (an incident's 40
    streams once decoded at ~27 ms a token where the linear model said ~6). A guard, not
    the cause of the 2026-12-06 CI failure (that was seat waits: ``sizing.wait_probability``):
    in the three runs since, a full batch was served 3-13 % faster than modelled, so the
    model set the rate. The makespan of a full batch bounds the capacity the verification's
    arrivals must stay under, measured on the engine it verifies."""
    if seats < 1 or prompt < 1 or output < 1:
        raise CalibrationError("a served-rate probe needs at least one seat and one token")
    plan = [PlannedRequest(first_seq + i, 0.0, prompt, output) for i in range(seats)]
    outcomes = send_batch(plan)
    for outcome in outcomes:
        _check(outcome, "served-rate")
    makespan = max(o.e2e_s for o in outcomes if o.e2e_s is not None)
    if makespan <= 0:
        raise CalibrationError("the served-rate probe took no time")
    return seats / makespan


@dataclass(frozen=True)
class EngineKv:
    """The engine's own KV report (``vllm:cache_config_info``), read by the product's parser."""

    tokens: int
    block_size: int


def engine_kv(metrics_url: str) -> EngineKv:
    """KV capacity and block size from one scrape of the engine's /metrics."""
    signals = engine_signals(parse_exposition(_scrape(metrics_url)))
    tokens = signals.gauges.get("kv_capacity_tokens")
    block = signals.gauges.get("kv_block_size")
    if tokens is None or block is None:
        raise CalibrationError("the engine's /metrics carries no cache_config_info KV capacity")
    return EngineKv(int(tokens.value), int(block.value))


def engine_costs(calibration: Calibration, kv: EngineKv, *, max_model_len: int) -> EngineCosts:
    """The calibration and KV report as ``realengine.sizing.EngineCosts``."""
    return EngineCosts(
        prefill_ms_per_token=calibration.prefill_ms_per_token,
        decode_step_ms=calibration.decode_step_ms,
        decode_step_ms_per_seq=calibration.decode_step_ms_per_seq,
        kv_tokens=kv.tokens, block_size=kv.block_size, max_model_len=max_model_len,
        request_ms=calibration.request_ms,
    )  # fmt: skip


def cautious(costs: EngineCosts, calibration: Calibration) -> EngineCosts:
    """``costs`` with every step at least the slowest one measured: what a load that must
    be served (healthy traffic, a fix's verification) is sized against. Overloads use the
    medians: twice the median capacity is still overload when the machine speeds up."""
    if not calibration.slowest_step_ms:
        return costs
    return dataclasses.replace(
        costs, decode_step_ms=max(costs.decode_step_ms, *calibration.slowest_step_ms.values())
    )


def tiny_budget(
    calibration: Calibration,
    *,
    kv_tokens: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    ttft_target_ms: float,
    itl_ceiling_ms: float,
    queue_baseline_high: int = 8,
) -> dict:
    """Budget constants (``deployments.budget.Budget`` fields) for the tiny model served
    on this engine: its KV capacity in tokens, measured costs, and the scenario's SLOs."""
    per_token = kv_bytes_per_token(TINY_LLAMA, DTYPE_BYTES[machine_dtype()])
    return {
        "weights_gb": 0.01,
        "tp_size": 1,
        "gpu_memory_gib_per_rank": 1.0,
        "kv_budget_gib_per_rank": kv_tokens * per_token / GIB,
        "kv_bytes_per_token": per_token,
        "prefill_ms_per_token": round(calibration.prefill_ms_per_token, 5),
        "decode_step_ms": round(calibration.decode_step_ms, 3),
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "ttft_target_ms": ttft_target_ms,
        "itl_ceiling_ms": itl_ceiling_ms,
        "queue_baseline_low": max(1, queue_baseline_high // 3),
        "queue_baseline_high": queue_baseline_high,
    }
