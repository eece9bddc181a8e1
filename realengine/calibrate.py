"""Measure a real engine's budget constants on an idle engine: prefill cost per token and
the decode step, the two numbers the playbooks' arithmetic is built on.

A CPU vLLM is orders of magnitude slower than the Atlas deployment the seed describes,
so its deployments must carry constants measured on it, never Atlas's. Prefill cost is
the slope of TTFT over prompt length (one request at a time, one output token, so
neither queueing nor batching is in it); the decode step is a single stream's decode
time per token, (e2e - TTFT) / (tokens - 1). Not the median gap between chunks: on a busy
machine the server's events reach the client in bunches, and most gaps read as ~0.
Medians over repeats keep a busy machine's hiccups out.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.client import run_plan
from loadgen.plan import PlannedRequest
from loadgen.report import Outcome
from realengine.model import TINY_LLAMA, kv_bytes_per_token

GIB = 1024**3


class CalibrationError(RuntimeError):
    """The engine did not answer the calibration requests."""


@dataclass(frozen=True)
class Calibration:
    prefill_ms_per_token: float
    decode_step_ms: float
    idle_ttft_ms: dict[int, float]  # median TTFT by prompt length

    def as_dict(self) -> dict:
        return {
            "prefill_ms_per_token": self.prefill_ms_per_token,
            "decode_step_ms": self.decode_step_ms,
            "idle_ttft_ms": {str(k): v for k, v in self.idle_ttft_ms.items()},
        }


Sender = Callable[[PlannedRequest], Outcome]


def http_sender(url: str, model: str, *, seed: int = 7) -> Sender:
    def send(request: PlannedRequest) -> Outcome:
        (outcome,) = run_plan(
            [request], url, model=model, seed=seed, request_timeout_s=120
        ).outcomes
        return outcome

    return send


def calibrate(
    send: Sender,
    *,
    short: int = 32,
    long: int = 768,
    repeats: int = 5,
    decode_tokens: int = 64,
) -> Calibration:
    """Idle calibration: ``repeats`` one-token requests at each prompt length, then one
    single stream of ``decode_tokens`` tokens per repeat."""
    seq = 0
    ttfts: dict[int, list[float]] = {short: [], long: []}
    for _ in range(repeats):
        for length in (short, long):
            outcome = send(PlannedRequest(seq, 0.0, length, 1))
            seq += 1
            if outcome.status != "ok" or outcome.ttft_s is None:
                raise CalibrationError(f"prefill probe failed: {outcome.error}")
            ttfts[length].append(outcome.ttft_s * 1000)
    steps: list[float] = []
    for _ in range(repeats):
        outcome = send(PlannedRequest(seq, 0.0, short, decode_tokens))
        seq += 1
        if outcome.status != "ok" or outcome.ttft_s is None or outcome.e2e_s is None:
            raise CalibrationError(f"decode probe failed: {outcome.error}")
        if outcome.output_tokens < 2:
            raise CalibrationError("decode probe returned fewer than two tokens")
        steps.append((outcome.e2e_s - outcome.ttft_s) * 1000 / (outcome.output_tokens - 1))
    medians = {k: statistics.median(v) for k, v in ttfts.items()}
    slope = (medians[long] - medians[short]) / (long - short)
    return Calibration(max(slope, 1e-4), statistics.median(steps), medians)


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
    per_token = kv_bytes_per_token(TINY_LLAMA)
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
