"""enginesim as the twin of a measured real engine, and the figures the two are compared on.

The simulator is the fast test bed and the demo; it is only worth trusting where it behaves
like the engine it stands for. So the comparison is made the way the product sees an engine:
the same request plan (``loadgen.plan``) is sent to the real vLLM over HTTP and replayed
into an enginesim ``Engine`` built from the constants the calibration measured on that
vLLM (prefill cost per token, decode step and its growth per sequence, KV tokens, block
size, seats, step budget). Both are then read through the product's own parser
(``probes.parsing.engine.engine_signals``) every ``sample_s`` and reduced to the same
figures: peaks of the gauges the playbooks judge (KV usage, waiting, running), counter
deltas (preemptions, finished requests, tokens) and the engine's own latency histograms
over the run (TTFT, ITL, end-to-end, queue time: mean from ``_sum/_count``, p50/p95 from the
buckets).

What the twin does not model, by construction, shows up as a difference rather than being
tuned away: the per-request cost outside the engine core (HTTP, tokenisation, the
calibration's ``request_ms`` intercept), a busy machine's varying speed, and the real
scheduler's admission details. Everything except :func:`run_twin` is pure.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from enginesim.config import DeploymentConstants, EngineConfig, GiB, KiB
from enginesim.engine import Engine
from enginesim.exposition import vllm as vllm_exposition
from enginesim.workload import Arrival, RateProfile, WorkloadSpec
from loadgen.plan import PlannedRequest
from probes.parsing.engine import EngineSignals, engine_signals
from probes.parsing.exposition import parse_exposition
from probes.parsing.windowed import bucket_quantile
from realengine.sizing import EngineCosts

TWIN_MODEL = "tiny-llama"
# Bytes a KV token costs in the twin: any positive size works, the capacity is set in tokens.
TWIN_KV_BYTES_PER_TOKEN = KiB


def twin_constants(costs: EngineCosts) -> DeploymentConstants:
    """The simulator's physics set to what the calibration measured on the real engine.

    The per-sequence growth of the decode step is CPU work per sequence in the twin (the
    simulator's ``sched_overhead_per_seq_s``); attention, launch and fixed scheduling costs
    are folded into the measured step, so they are zero here rather than Atlas's."""
    return DeploymentConstants(
        weights_bytes_total=GiB,
        tp_size=1,
        kv_bytes_per_token=TWIN_KV_BYTES_PER_TOKEN,
        kv_budget_bytes_per_rank=costs.kv_tokens * TWIN_KV_BYTES_PER_TOKEN,
        prefill_cost_per_token_s=max(costs.prefill_ms_per_token, 1e-6) / 1e3,
        decode_step_s=costs.decode_step_ms / 1e3,
        attention_cost_per_context_token_s=0.0,
        sched_overhead_s=0.0,
        sched_overhead_per_seq_s=costs.decode_step_ms_per_seq / 1e3,
        eager_launch_overhead_s=0.0,
    )


def twin_config(
    costs: EngineCosts, *, max_num_seqs: int, max_num_batched_tokens: int
) -> EngineConfig:
    """The engine flags the real vLLM ran with (chunked prefill, as vLLM V1 always does)."""
    return EngineConfig(
        model_name=TWIN_MODEL,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=costs.block_size,
        max_model_len=costs.max_model_len,
        enforce_eager=True,
        kv_cache_memory_bytes=costs.kv_tokens * TWIN_KV_BYTES_PER_TOKEN,
    )


class ReplayArrivals:
    """The arrival process of a fixed plan: every request once, at its planned time, with
    the output length it asked for (the load generator sends ``ignore_eos``)."""

    def __init__(self, plan: Iterable[PlannedRequest]) -> None:
        self._queue = deque(sorted(plan, key=lambda r: (r.at_s, r.seq)))

    def peek(self) -> Arrival | None:
        if not self._queue:
            return None
        r = self._queue[0]
        return Arrival(
            arrival_s=r.at_s,
            prompt_len=r.prompt_tokens,
            output_len=r.max_tokens,
            max_tokens=r.max_tokens,
            priority=r.priority > 0,
            prefix_len=0,
            finish_reason="length",
        )

    def pop(self) -> Arrival:
        arrival = self.peek()
        if arrival is None:
            raise IndexError("no arrival left in the plan")
        self._queue.popleft()
        return arrival

    def __len__(self) -> int:
        return len(self._queue)


def twin_engine(
    costs: EngineCosts,
    plan: Sequence[PlannedRequest],
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    seed: int = 0,
) -> Engine:
    """An enginesim engine on the real engine's constants that receives exactly ``plan``."""
    engine = Engine(
        0,
        constants=twin_constants(costs),
        config=twin_config(
            costs, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
        ),
        workload=WorkloadSpec(rate=RateProfile.constant(0.0)),
        seed=seed,
        fmt="vllm-v1",
    )
    engine.arrivals = ReplayArrivals(plan)  # type: ignore[assignment]
    return engine


def twin_signals(engine: Engine) -> EngineSignals:
    """What the product reads from the twin: its V1 exposition through the real parser."""
    return engine_signals(parse_exposition(vllm_exposition.render_v1(engine, "0").encode()))


def run_twin(
    engine: Engine, *, until_s: float, sample_s: float, drained: Callable[[Engine], bool]
) -> list[tuple[float, EngineSignals]]:
    """Advance the twin in ``sample_s`` steps, reading it each time, until ``until_s`` or
    (after the plan is in) until ``drained`` says the engine has nothing left."""
    samples = [(0.0, twin_signals(engine))]
    t = 0.0
    while t < until_s:
        t = min(until_s, t + sample_s)
        engine.advance_to(t)
        samples.append((t, twin_signals(engine)))
        if drained(engine):
            break
    return samples


def twin_drained(engine: Engine) -> bool:
    """Every planned request arrived and none is waiting or running."""
    arrivals = engine.arrivals
    left = len(arrivals) if isinstance(arrivals, ReplayArrivals) else 1
    return left == 0 and not engine.sched.running and not engine.sched.num_waiting


@dataclass(frozen=True)
class Figures:
    """One run reduced to what the playbooks judge; None where the run gave no data."""

    kv_usage_peak: float | None
    waiting_peak: float | None
    running_peak: float | None
    preemptions: float | None
    finished: float | None
    generation_tokens: float | None
    ttft_mean_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    itl_mean_s: float | None
    itl_p95_s: float | None
    e2e_mean_s: float | None
    queue_mean_s: float | None


def _peak(samples: Sequence[EngineSignals], key: str) -> float | None:
    values = [s.gauges[key].value for s in samples if key in s.gauges]
    return max(values) if values else None


def _delta(first: EngineSignals, last: EngineSignals, key: str) -> float | None:
    if key not in last.counters:
        return None
    before = first.counters[key].value if key in first.counters else 0.0
    return last.counters[key].value - before


def _hist_delta(
    first: EngineSignals, last: EngineSignals, key: str
) -> tuple[float | None, list[tuple[float, float]]]:
    """The run's own observations of ``key``: (mean, buckets as (le, cumulative count))."""
    after = last.histograms.get(key)
    if after is None or after.count is None or after.sum is None:
        return None, []
    before = first.histograms.get(key)
    c0 = before.count if before is not None and before.count is not None else 0.0
    s0 = before.sum if before is not None and before.sum is not None else 0.0
    start = dict(before.buckets) if before is not None else {}
    buckets = [(le, n - start.get(le, 0.0)) for le, n in after.buckets]
    count = after.count - c0
    mean = (after.sum - s0) / count if count > 0 else None
    return mean, buckets


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    if not buckets or buckets[-1][1] <= 0:
        return None
    value = bucket_quantile(q, buckets)
    return value if math.isfinite(value) else None


def figures(samples: Sequence[EngineSignals]) -> Figures:
    """Reduce a run's readings (first = before the load, last = after it drained)."""
    if not samples:
        raise ValueError("a run needs at least one reading")
    first, last = samples[0], samples[-1]
    ttft_mean, ttft = _hist_delta(first, last, "ttft")
    itl_mean, itl = _hist_delta(first, last, "itl")
    e2e_mean, _ = _hist_delta(first, last, "e2e")
    queue_mean, _ = _hist_delta(first, last, "queue_time")
    return Figures(
        kv_usage_peak=_peak(samples, "kv_cache_usage"),
        waiting_peak=_peak(samples, "requests_waiting"),
        running_peak=_peak(samples, "requests_running"),
        preemptions=_delta(first, last, "preemptions_total"),
        finished=_delta(first, last, "requests_finished_total"),
        generation_tokens=_delta(first, last, "generation_tokens_total"),
        ttft_mean_s=ttft_mean,
        ttft_p50_s=_quantile(0.5, ttft),
        ttft_p95_s=_quantile(0.95, ttft),
        itl_mean_s=itl_mean,
        itl_p95_s=_quantile(0.95, itl),
        e2e_mean_s=e2e_mean,
        queue_mean_s=queue_mean,
    )


@dataclass(frozen=True)
class Difference:
    figure: str
    real: float | None
    twin: float | None

    @property
    def ratio(self) -> float | None:
        """twin / real; None where either is missing or the real figure is zero."""
        if self.real is None or self.twin is None or self.real == 0:
            return None
        return self.twin / self.real


def differences(real: Figures, twin: Figures) -> list[Difference]:
    """Every figure side by side, in the dataclass's order."""
    return [
        Difference(name, getattr(real, name), getattr(twin, name))
        for name in Figures.__dataclass_fields__
    ]
