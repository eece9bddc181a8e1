"""Randomised incidents: the named scenarios re-scaled to drawn models, GPUs and traffic.

The scenario matrix runs every incident on Atlas's own engine (a 70B model on four A100s,
0.035 ms per prefill token, 45 ms decode step, 320 KiB of KV per token), and the playbooks'
thresholds were tuned on it. A draw is the same incident on a deployment Atlas has not
seen: a model size and GPU with consistent constants (weights and KV bytes from the
architecture, decode step from the weights each rank reads per step, prefill cost from
the FLOPs per token, both relative to Atlas's calibration), tensor parallelism 1-8, a bucket
layout from a real engine release or a team's custom one, a load level, an exposition
format, sources that a team may not have, and a seed. Each draw carries its ground truth
(the scenario's cause keys) and the budget the team would register in Atlas (their own
constants, measured to within a few per cent, not the simulator's exact ones).

Draws are pure functions of ``(scenario, seed)``: one ``random.Random`` seeded from both, so
the same pair always gives the same deployment, and a draw never depends on what was drawn
before it. The simulation itself is then deterministic per seed as the simulator is.

The scaling keeps each incident's *mechanism* (what the scenario docstrings in
``enginesim.scenarios`` describe) and re-derives its sizes from the drawn constants: the
KV-pressure ramp fills the drawn KV capacity, an oversized chunk is oversized against the
team's own chunk budget, a GC pause or a throttled rank is long enough to cross the team's
own ITL ceiling. Whether the symptom then shows is measured, never assumed
(``symptom_shows``).
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from enginesim import scenarios
from enginesim.config import DeploymentConstants, EngineConfig, GiB, KiB, MiB
from enginesim.gpu import STARTUP_HEADROOM_BYTES
from enginesim.scenarios import Scenario
from enginesim.workload import LengthDist, RateProfile, WorkloadSpec

# Atlas's calibration point: every drawn constant is scaled from it by physics ratios.
ATLAS = DeploymentConstants()
ATLAS_PARAMS_B = 70.0
ATLAS_HBM_TBPS = 2.04  # A100-SXM4-80GB
ATLAS_TFLOPS = 312.0  # A100 dense BF16


@dataclass(frozen=True)
class Model:
    name: str
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2  # weights (fp8 = 1)


@dataclass(frozen=True)
class Gpu:
    name: str  # dcgm-exporter's modelName
    memory_gib: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    hbm_tbps: float
    tflops: float
    power_w: float


MODELS = (
    Model("llama-3.1-8b", 8.0, 32, 8, 128),
    Model("mistral-7b", 7.2, 32, 8, 128),
    Model("qwen2.5-14b", 14.8, 48, 8, 128),
    Model("qwen2.5-32b", 32.8, 64, 8, 128),
    Model("llama-3.1-70b", 70.6, 80, 8, 128),
    Model("qwen2.5-72b", 72.7, 80, 8, 128),
    Model("llama-3.1-405b-fp8", 405.0, 126, 8, 128, dtype_bytes=1),
)
GPUS = (
    Gpu("NVIDIA A100-SXM4-80GB", 80, 1410, 1593, 2.04, 312.0, 400.0),
    Gpu("NVIDIA A100-SXM4-40GB", 40, 1410, 1215, 1.56, 312.0, 400.0),
    Gpu("NVIDIA H100 80GB HBM3", 80, 1980, 2619, 3.35, 989.0, 700.0),
    Gpu("NVIDIA H200", 141, 1980, 3201, 4.8, 989.0, 700.0),
    Gpu("NVIDIA L40S", 48, 2520, 9001, 0.864, 362.0, 350.0),
    Gpu("NVIDIA A10G", 24, 1710, 6251, 0.6, 125.0, 300.0),
)
TP_SIZES = (1, 2, 4, 8)

# Bucket layouts: each engine release's defaults (engine-metrics.md §1.3-1.4, §2.3; early
# V0 checked against vllm-project/vllm vllm/engine/metrics.py @ 00c33e81) and two layouts a
# team might configure with --custom-histogram-buckets. None: the format's current defaults.
VLLM_EARLY_V0 = {
    "time_to_first_token": (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    ),
    "inter_token_latency": (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    ),
    "request_latency": (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
}  # fmt: skip
CUSTOM_COARSE = {
    "time_to_first_token": (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    "inter_token_latency": (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    "request_latency": (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
    "iteration_tokens": (1, 16, 128, 1024, 8192, 65536),
}
CUSTOM_FINE = {
    # Exponential, factor ~1.5: what a team chasing tails sets.
    "time_to_first_token": tuple(round(0.01 * 1.5**i, 5) for i in range(22)),
    "inter_token_latency": tuple(round(0.002 * 1.5**i, 5) for i in range(20)),
    "request_latency": tuple(round(0.05 * 1.5**i, 4) for i in range(24)),
    "iteration_tokens": tuple(2**i for i in range(17)),
}


def _v06_iteration_buckets() -> dict[str, tuple[float, ...]]:
    """vLLM V0 ~0.6-0.7: the iteration-token buckets were the CUDA-graph capture sizes."""
    return {"iteration_tokens": tuple(float(s) for s in (1, 2, 4, *range(8, 257, 8)))}


LAYOUTS: dict[str, Callable[[str], dict[str, tuple[float, ...]] | None]] = {
    "default": lambda fmt: None,
    "vllm-early-v0": lambda fmt: VLLM_EARLY_V0 if fmt == "vllm-v0" else None,
    "vllm-v0.6-iteration": lambda fmt: _v06_iteration_buckets() if fmt == "vllm-v0" else None,
    "custom-coarse": lambda fmt: CUSTOM_COARSE,
    "custom-fine": lambda fmt: CUSTOM_FINE,
}

# Sources: engine /metrics, dcgm-exporter, the engine log; artifacts a person uploads.
# Prometheus is never offered in-process (router-latency always has no data).
SOURCES = ("engine", "dcgm", "log")
ARTIFACTS = ("trace", "snapshot", "gc_log")
# What each cause needs to be confirmed at all (its non-optional confirming checks).
NEEDS: dict[str, tuple[str, ...]] = {
    "kv-cache-pressure": ("engine",),
    "kv-block-leak": ("engine",),
    "prefill-slow": ("engine",),
    "queue-backlog": ("engine",),
    "oversized-prefill-chunks": ("engine",),
    "gc-pauses": ("gc_log",),
    "tp-straggler": ("dcgm",),
    "gpu-throttling": ("dcgm",),
    "cuda-graph-pool-growth": ("log",),
    "allocator-leak": ("snapshot",),
    "router-latency": ("prometheus",),
}
# The symptom each incident raises (what the on-call opens), as the matrix has them.
SYMPTOMS: dict[str, tuple[str, ...]] = {
    "healthy": ("high-ttft", "itl-spikes", "gpu-oom"),
    "kv-pressure": ("high-ttft",),
    "prefill-slow": ("high-ttft",),
    "kv-block-leak": ("high-ttft",),
    "prefill-unchunked": ("itl-spikes",),
    "long-prefill-itl": ("itl-spikes",),
    "gc-pauses": ("itl-spikes",),
    "tp-straggler": ("itl-spikes",),
    "graph-pool-growth": ("gpu-oom",),
    "allocator-leak": ("gpu-oom",),
}
# Artifacts an on-call would collect for a symptom, each uploaded with its probability.
SYMPTOM_ARTIFACTS: dict[str, tuple[tuple[str, float], ...]] = {
    "high-ttft": (),
    "itl-spikes": (("trace", 0.7), ("gc_log", 0.7)),
    "gpu-oom": (("snapshot", 0.8),),
}
# How long the incident may take to show before the draw is opened anyway.
DEADLINE_S: dict[str, float] = {
    "healthy": 300.0,
    "kv-pressure": 600.0,
    "prefill-slow": 300.0,
    "kv-block-leak": 2400.0,
    "prefill-unchunked": 300.0,
    "long-prefill-itl": 300.0,
    "gc-pauses": 300.0,
    "tp-straggler": 300.0,
    "graph-pool-growth": 1800.0,
    "allocator-leak": 900.0,
}
# Pairs of incidents that can both show at once (neither hides the other by design).
PAIRS = (
    "kv-pressure+tp-straggler",
    "gc-pauses+long-prefill-itl",
    "gc-pauses+tp-straggler",
    "allocator-leak+tp-straggler",
    "gc-pauses+kv-block-leak",
    "prefill-unchunked+tp-straggler",
)
SINGLES = tuple(SYMPTOMS)


@dataclass(frozen=True)
class Draw:
    """One randomised incident and everything a bench needs to run and score it."""

    scenario: str
    seed: int
    model: str
    gpu: str
    fmt: str
    layout: str
    load: float
    constants: DeploymentConstants
    sim: Scenario
    budget: dict[str, Any]  # deployments.budget.Budget fields, as the team registers them
    causes: tuple[str, ...]  # ground truth
    symptoms: tuple[str, ...]
    sources: tuple[str, ...]  # engine / dcgm / log that the deployment has
    artifacts: tuple[str, ...]  # trace / snapshot / gc_log the on-call uploads
    deadline_s: float
    notes: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"{self.scenario} seed={self.seed} {self.model} on {self.constants.tp_size}x "
            f"{self.gpu} {self.fmt}/{self.layout} load={self.load:.2f} "
            f"sources={'+'.join(self.sources) or '-'} artifacts={'+'.join(self.artifacts) or '-'}"
        )

    def deployment(self, clock: Any = None) -> Any:
        """The simulator for this draw (one replica), on ``clock`` (a manual one for benches)."""
        from enginesim.deployment import Deployment

        return Deployment(
            self.sim, seed=self.seed, fmt=self.fmt, clock=clock, constants=self.constants
        )

    def answerable(self, cause: str) -> bool:
        """Whether the sources this draw has can confirm ``cause`` at all."""
        have = set(self.sources) | set(self.artifacts)
        return all(need in have for need in NEEDS.get(cause, ()))


# ---------------------------------------------------------------------- constants


@dataclass(frozen=True)
class _Hardware:
    model: Model
    gpu: Gpu
    constants: DeploymentConstants


def _fits(model: Model, gpu: Gpu, tp: int) -> bool:
    """Weights take at most 60 % of each rank (KV, activations and graphs need the rest)."""
    return model.params_b * model.dtype_bytes * 1e9 / tp <= 0.6 * gpu.memory_gib * GiB


def _hardware(rng: random.Random, min_tp: int = 1) -> _Hardware:
    while True:
        model, gpu = rng.choice(MODELS), rng.choice(GPUS)
        fitting = [tp for tp in TP_SIZES if tp >= min_tp and _fits(model, gpu, tp)]
        if fitting:
            break
    # The smallest TP that fits, or one step up (teams buy latency with more GPUs).
    tp = fitting[min(len(fitting) - 1, rng.choice((0, 0, 1)))]
    weights = int(model.params_b * model.dtype_bytes * 1e9)
    # Per rank: K and V of every layer for the rank's share of KV heads (bf16 cache).
    kv_per_token = 2 * model.layers * model.kv_heads * model.head_dim * 2 // min(tp, model.kv_heads)
    size = model.params_b / ATLAS_PARAMS_B
    # Decode is memory-bound: the weights each rank reads per step over its bandwidth.
    decode = ATLAS.decode_step_s * (weights / tp) / (ATLAS.weights_bytes_per_rank)
    decode *= ATLAS_HBM_TBPS / gpu.hbm_tbps
    decode = max(0.006, decode) * rng.uniform(0.85, 1.15) + 0.0008 * (tp > 1)
    # Prefill is compute-bound: FLOPs per token (2 x params) over the group's FLOPs.
    prefill = ATLAS.prefill_cost_per_token_s * size * (ATLAS.tp_size / tp)
    prefill *= ATLAS_TFLOPS / gpu.tflops * rng.uniform(0.8, 1.25)
    attention = ATLAS.attention_cost_per_context_token_s * kv_per_token / ATLAS.kv_bytes_per_token
    attention *= ATLAS_HBM_TBPS / gpu.hbm_tbps
    act_scale = min(2.0, max(0.125, size * ATLAS.tp_size / tp))
    constants = replace(
        ATLAS,
        weights_bytes_total=weights,
        tp_size=tp,
        kv_bytes_per_token=kv_per_token,
        kv_budget_bytes_per_rank=GiB,  # set by _kv_budget once the engine config is known
        prefill_cost_per_token_s=prefill,
        decode_step_s=decode,
        attention_cost_per_context_token_s=attention,
        device_total_bytes=gpu.memory_gib * GiB,
        device_name=gpu.name,
        sm_clock_max_mhz=gpu.sm_clock_mhz,
        mem_clock_mhz=gpu.mem_clock_mhz,
        power_max_w=gpu.power_w,
        activation_base_bytes=int(2 * GiB * act_scale),
        activation_bytes_per_batched_token=max(128 * KiB, int(MiB * act_scale)),
    )
    return _Hardware(model, gpu, constants)


def _startup_used(c: DeploymentConstants, cfg: EngineConfig) -> int:
    """Bytes one rank holds at start-up besides the KV pool (as enginesim.gpu counts them)."""
    act = c.activation_base_bytes + cfg.max_num_batched_tokens * (
        c.activation_bytes_per_batched_token // 2
    )
    sizes = cfg.capture_sizes
    pool = (
        c.warmup_graph_pool_base_bytes + len(sizes) * c.warmup_graph_pool_bytes_per_size
        if sizes
        else 0
    )
    return c.non_torch_bytes + c.weights_bytes_per_rank + act + pool


def _kv_budget(c: DeploymentConstants, cfg: EngineConfig, headroom: int | None) -> int:
    """vLLM's profiling: 90 % of the device minus everything else, or, for the memory
    incidents, what leaves exactly ``headroom`` free after start-up."""
    used = _startup_used(c, cfg)
    if headroom is None:
        kv = int(0.9 * c.device_total_bytes) - used
    else:
        kv = c.device_total_bytes - used - max(headroom, STARTUP_HEADROOM_BYTES)
    return max(kv, GiB)


# ------------------------------------------------------------------------ context


@dataclass
class _Ctx:
    """What a scenario's scaling needs: constants, the team's settings, the rng."""

    rng: random.Random
    c: DeploymentConstants
    seats: int
    chunk: int  # the team's chunk budget (max_num_batched_tokens they registered)
    load: float
    itl_ceiling_s: float = 0.15
    ttft_target_s: float = 0.6
    headroom: int | None = None  # memory incidents: free bytes per rank after start-up
    prefill_factor: float = 1.0  # true prefill cost / the team's
    notes: dict[str, float] = field(default_factory=dict)

    @property
    def step_s(self) -> float:
        """A decode step of a full batch (weights + overheads), the playbook's 45 ms + 2."""
        c = self.c
        return c.decode_step_s + c.sched_overhead_s + self.seats * c.sched_overhead_per_seq_s

    def mixed_step_s(self, chunk: int | None = None) -> float:
        tokens = self.chunk if chunk is None else chunk
        return self.step_s + tokens * self.c.prefill_cost_per_token_s * self.prefill_factor

    def rate_for(self, prompt: float, output: float, load: float | None = None) -> float:
        """Arrivals per second at ``load`` x what one engine serves: every request's prefill
        plus its share of the decode steps of a full batch (seats the KV cache permits),
        and at most ``load`` x what the prefill lane admits."""
        capacity_tokens = self.c.kv_budget_bytes_per_rank // self.c.kv_bytes_per_token
        seats = min(self.seats, capacity_tokens / max(1.0, prompt + output / 2))
        prefill = prompt * self.c.prefill_cost_per_token_s * self.prefill_factor
        gpu_s_per_request = prefill + output * self.step_s / max(1.0, seats)
        share = self.load if load is None else load
        # The prefill lane binds before the GPU's FLOPs do: a step admits at most the chunk
        # budget less one token per running decode (rate x output x step, Little's law),
        # and a step never takes less than the decode floor however few prompt tokens it
        # carries. At ``share`` of the lane: rate x prompt x mixed step <= share x (chunk -
        # rate x output x step). A chunk of 512 beside 100 decodes admits ~400 prompt
        # tokens a 25 ms step: "healthy" draws at 0.6 of the FLOPs were 1.3x the lane,
        # queued for seconds and confirmed a capacity backlog.
        lane = share * self.chunk / (prompt * self.mixed_step_s() + share * output * self.step_s)
        return min(share / gpu_s_per_request, lane)

    def seat_and_lane_rates(self, prompt: float, output: float) -> tuple[float, float]:
        """Requests per second the seats serve (each holds its seat for its prompt's
        chunks, then its output's decode steps) and the prefill lane serves (prompts of
        ``prompt`` tokens, ``chunk`` tokens a mixed step)."""
        chunks = max(1.0, prompt / self.chunk)
        hold_s = chunks * self.mixed_step_s() + output * self.step_s
        return self.seats / hold_s, 1.0 / (chunks * self.mixed_step_s())

    def ttft_floor_s(self, prompt: float) -> float:
        """The lowest TTFT target a team serving ``prompt``-token prompts sets: three times
        what one such prompt takes (its chunks in mixed steps, then a few decode steps),
        rounded up to 100 ms. A target below its own prompts' prefill fires every day."""
        typical = math.ceil(prompt / self.chunk) * self.mixed_step_s() + 4 * self.step_s
        return _round_up(3 * typical, 0.1)

    def generic(self, load: float | None = None) -> WorkloadSpec:
        w = WorkloadSpec()
        return replace(w, rate=RateProfile.constant(self.rate_for(700 * 1.1, 180 * 1.2, load)))


Scaler = Callable[[_Ctx, Scenario], Scenario]
_SCALERS: dict[str, Scaler] = {}


def _scales(name: str) -> Callable[[Scaler], Scaler]:
    def deco(fn: Scaler) -> Scaler:
        _SCALERS[name] = fn
        return fn

    return deco


@_scales("healthy")
def _healthy(x: _Ctx, sc: Scenario) -> Scenario:
    return replace(sc, workload=x.generic())


@_scales("kv-pressure")
def _kv_pressure(x: _Ctx, sc: Scenario) -> Scenario:
    """Seats x the average context a seat holds (its prompt and half its output) about the
    KV capacity (Atlas: 40 x (2,000 + 1,100 / 2) = 0.94 C, at 0.95 with preemptions), a
    ramp to just over what the seats serve."""
    capacity = x.c.kv_budget_bytes_per_rank // x.c.kv_bytes_per_token
    # Contexts of at most ~6k tokens: a big KV pool is filled by more seats, not longer
    # prompts (the seats a team with that much cache would run).
    x.seats = min(1024, max(x.seats, 16 * math.ceil(capacity * 1.1 / 6000 / 16)))
    # What the full seats hold on average, over the capacity. vLLM preempts only when a
    # running request needs a block and none is free (the scheduler's can_append_slots
    # fails): seats whose average context leaves a fifth of the cache free fill their seats
    # first, and the queue that raises TTFT is a seat-limited backlog at a KV usage of
    # 0.5-0.8 with no preemption, which is not KV pressure. (Sizing the *full* contexts at
    # 1.0-1.2 C did that whenever the split below moved tokens from prompt to output: the
    # held-out failures were all such draws, at 0.67-0.85 C on average.)
    occupancy = x.rng.uniform(0.95, 1.15)
    # The seats must fill the cache before the prefill lane saturates: with chunked
    # prefill a prompt takes prompt / chunk mixed steps of the one lane all prompts share,
    # while outputs decode side by side. Where the seats would turn over faster than the
    # lane can prefill (many seats, a small chunk, long prompts), the queue grows at a half
    # empty cache: a prefill backlog, not KV pressure. So the split keeps the rate the seats
    # serve at most 0.6 of the lane's (a longer output share: more decoding per prompt).
    # The prompt's share of a request runs from long-output work (reasoning, long answers:
    # a quarter; the real CPU vLLM's KV storm, 300-token prompts for 600 tokens, is a third)
    # to prompt-heavy chat and RAG (0.85). Only the prompt-heavy end was drawn before, and a
    # storm's survivors near their full length, which only long outputs make far from
    # "prompt plus half the output", was never seen here though the real engine showed it.
    fraction, overload = x.rng.uniform(0.25, 0.85), x.rng.uniform(1.05, 1.35)
    while True:
        total = capacity * occupancy / x.seats / (fraction + (1 - fraction) / 2)
        prompt = total * fraction
        output = max(48.0, total - prompt)
        seat_rate, lane_rate = x.seat_and_lane_rates(prompt, output)
        if seat_rate <= 0.6 * lane_rate or fraction <= 0.2:
            break
        fraction -= 0.05
    # A ramp to just over what the seats serve, below what the lane prefills.
    peak = seat_rate * overload
    t0, ramp = 30.0, 150.0
    rate = RateProfile(
        (
            (0.0, 0.33 * peak),
            (t0, 0.33 * peak),
            (t0 + ramp, peak),
            (t0 + ramp + 120.0, peak),
            (t0 + ramp + 240.0, 0.28 * peak),
        )
    )
    wl = WorkloadSpec(
        rate=rate,
        prompt=LengthDist(
            median=prompt, sigma=0.25, lo=max(16, int(prompt * 0.1)), hi=int(prompt * 1.9)
        ),
        output=LengthDist(median=output, sigma=0.35, lo=16, hi=int(output * 2.6)),
    )
    # The team's TTFT target is set for *their* prompts (thousands of tokens here), not the
    # generic 770: else the long prompts' own prefill fires the alarm before KV fills.
    x.ttft_target_s = round(max(x.ttft_target_s, x.ttft_floor_s(prompt)), 3)
    x.notes.update(
        kv_prompt=prompt,
        kv_output=output,
        kv_peak_rate=peak,
        kv_lane_rate=lane_rate,
        kv_occupancy=occupancy,
    )
    return replace(sc, workload=wl, config={**sc.config, "max_num_batched_tokens": x.chunk})


@_scales("prefill-slow")
def _prefill_slow(x: _Ctx, sc: Scenario) -> Scenario:
    """Prefill runs ``ratio`` x the wall time the team budgets (an attention backend that
    fell back, a slower kernel): long prompts at light load, queue and KV healthy."""
    ratio = x.rng.uniform(2.2, 3.5)
    base = x.step_s + x.chunk * x.c.prefill_cost_per_token_s
    chunk_true = (ratio * base - x.step_s) / (x.chunk * x.c.prefill_cost_per_token_s)
    x.prefill_factor = chunk_true
    steps = max(2, math.ceil(1.6 * x.ttft_target_s / (ratio * base)))
    prompt = min(steps * x.chunk * 0.9, 24000.0)
    rate = x.rate_for(prompt, 150, x.rng.uniform(0.2, 0.4))
    # KV healthy, as the incident is drawn: the requests in flight (Little's law: arrivals x
    # how long each holds its blocks) hold a quarter of the cache, so that a burst of four
    # times as many arrivals still fits (arrivals are Poisson). Each holds its blocks
    # through its prompt's slow chunks and then its output's steps, which run as mixed
    # steps of the slow prefill while the lane is busy; unbounded, a small cache under
    # prompts of tens of thousands of tokens filled and preempted (KV pressure as well).
    capacity = x.c.kv_budget_bytes_per_rank // x.c.kv_bytes_per_token
    slow_mixed_s = ratio * base
    busy = min(1.0, rate * math.ceil(prompt / x.chunk) * slow_mixed_s)
    hold_s = math.ceil(prompt / x.chunk) * slow_mixed_s + 150 * (
        busy * slow_mixed_s + (1 - busy) * x.step_s
    )
    rate = min(rate, 0.25 * capacity / ((prompt + 75) * hold_s))
    x.notes.update(
        prefill_wall_ratio=ratio,
        prefill_cost_factor=chunk_true,
        prefill_prompt=prompt,
        prefill_kv_in_flight=rate * hold_s * (prompt + 75) / capacity,
    )
    wl = WorkloadSpec(
        rate=RateProfile.constant(rate),
        prompt=LengthDist(median=prompt, sigma=0.2, lo=int(prompt * 0.5), hi=int(prompt * 1.5)),
        output=LengthDist(median=150, sigma=0.5, lo=4, hi=800),
    )
    return replace(sc, workload=wl, config={**sc.config, "max_num_batched_tokens": x.chunk})


@_scales("prefill-unchunked")
def _prefill_unchunked(x: _Ctx, sc: Scenario) -> Scenario:
    """Chunked prefill off; long prompts long enough that one step crosses the ceiling."""
    cost = x.c.prefill_cost_per_token_s
    lo = max(4 * x.chunk, int(1.3 * x.itl_ceiling_s / cost))
    lo = min(lo, 12000)
    hi = min(int(lo * 1.9), 15000)
    x.notes.update(unchunked_prompt_lo=lo)
    wl = replace(
        x.generic(x.rng.uniform(0.3, 0.6)),
        long_prompt_fraction=x.rng.uniform(0.15, 0.3),
        long_prompt_lo=lo,
        long_prompt_hi=max(hi, lo + 1),
    )
    return replace(sc, workload=wl)


@_scales("long-prefill-itl")
def _long_prefill_itl(x: _Ctx, sc: Scenario) -> Scenario:
    """The engine runs a budget 8-16x the team's; priority long prompts fill it in one step."""
    cost = x.c.prefill_cost_per_token_s
    want = max(8 * x.chunk, int(2.0 * x.itl_ceiling_s / cost))
    engine_chunk = min(2 ** math.ceil(math.log2(want)), 16384)
    x.notes.update(engine_chunk=engine_chunk)
    wl = replace(
        x.generic(x.rng.uniform(0.25, 0.5)),
        long_prompt_fraction=x.rng.uniform(0.2, 0.4),
        long_prompt_lo=engine_chunk // 2,
        long_prompt_hi=int(engine_chunk * 1.25),
        long_prompts_are_priority=True,
    )
    return replace(sc, workload=wl, config={**sc.config, "max_num_batched_tokens": engine_chunk})


# Generation-2 collections of a large engine heap: tens of ms to a few hundred (the
# playbook's rationale and the matrix scenario: ~120 ms, rarely 300 ms; CPython's full
# collection walks every tracked object, ~1 ms per 10^4-10^5 of them, and an engine heap
# holds a few million). A pause of a second is a stop-the-world heap of tens of millions of
# objects, not an engine's: the drawn pause stays within this range.
GC_PAUSE_RANGE_S = (0.03, 0.4)


@_scales("gc-pauses")
def _gc_pauses(x: _Ctx, sc: Scenario) -> Scenario:
    """A pause long enough that even a decode-only step it lands in crosses the ceiling
    (enginesim adds the pause to the step's time), within GC_PAUSE_RANGE_S."""
    excess = max(0.0, x.itl_ceiling_s - x.step_s)
    lo, hi = GC_PAUSE_RANGE_S
    pause = min(hi, max(lo, excess * x.rng.uniform(1.1, 2.0)))
    x.notes.update(gc_pause_s=pause)
    config = {**sc.config, "gc_gen2_pause_s": pause}
    return replace(sc, workload=x.generic(), config=config)


@_scales("tp-straggler")
def _tp_straggler(x: _Ctx, sc: Scenario) -> Scenario:
    """One rank throttled enough that its replica's steps cross the ITL ceiling."""
    ratio = min(0.85, max(0.3, x.mixed_step_s() / x.itl_ceiling_s * x.rng.uniform(0.7, 0.95)))
    mhz = int(x.c.sm_clock_max_mhz * ratio)
    rank = x.rng.randrange(x.c.tp_size)
    x.notes.update(straggler_clock_ratio=ratio)
    return replace(sc, workload=x.generic(), straggler={rank: mhz})


@_scales("kv-block-leak")
def _kv_block_leak(x: _Ctx, sc: Scenario) -> Scenario:
    """A peak/off-peak cycle; the leak holds half the cache after 10-20 minutes.

    Outputs run from chat's (the generic 180 tokens) to long answers four times that: a
    leak must stay told apart from pressure where running requests hold long, growing
    contexts (and a storm's survivors sit near their full length)."""
    output = x.rng.uniform(180, 720)
    mean_output = output * math.exp(0.6**2 / 2)  # the generic spread, lognormal mean
    peak = x.rate_for(770, mean_output, x.rng.uniform(0.45, 0.7))
    period = 300.0
    rate = RateProfile(((0.0, 0.2 * peak), (period / 2, peak), (period, 0.2 * peak)), period)
    capacity = x.c.kv_budget_bytes_per_rank // x.c.kv_bytes_per_token
    fill_s = x.rng.uniform(600, 1200)
    finishes = 0.6 * peak * fill_s
    leak = min(0.5, 0.5 * capacity / (finishes * (700 + output)))
    x.notes.update(kv_leak_fraction=leak, leak_output_median=output)
    spec = WorkloadSpec()
    wl = replace(
        spec, rate=rate, output=replace(spec.output, median=output, hi=int(1500 * output / 180))
    )
    return replace(sc, workload=wl, config={**sc.config, "kv_leak_fraction": leak})


@_scales("allocator-leak")
def _allocator_leak(x: _Ctx, sc: Scenario) -> Scenario:
    x.headroom = int(x.rng.uniform(2, 8) * GiB)
    oom_s = x.rng.uniform(150, 420)
    rate = x.headroom / oom_s
    x.notes.update(leak_mib_per_s=rate / MiB, oom_expected_s=oom_s)
    return replace(
        sc, workload=x.generic(), config={**sc.config, "allocator_leak_bytes_per_s": rate}
    )


@_scales("graph-pool-growth")
def _graph_pool_growth(x: _Ctx, sc: Scenario) -> Scenario:
    """Room for one to three on-the-fly pools (1.5-2.5 GiB each) after start-up."""
    x.headroom = int(x.rng.uniform(2.6, 6.5) * GiB)
    wl = sc.workload_spec()
    rate = x.rate_for(260, 180, x.rng.uniform(0.3, 0.6))
    return replace(sc, workload=replace(wl, rate=RateProfile.constant(rate)))


# ---------------------------------------------------------------------- the draw


def _seed_rng(scenario: str, seed: int) -> random.Random:
    return random.Random(zlib.crc32(f"{scenario}:{seed}".encode()) * 1_000_003 + seed)


def _round_up(value: float, step: float) -> float:
    return math.ceil(value / step - 1e-9) * step


def _team_budget(x: _Ctx, cfg: EngineConfig, hw: _Hardware, sc_chunk: int) -> dict[str, Any]:
    """What the team types in: their constants as they measured them (within a few per
    cent), their intended chunk budget and seats, their SLOs; the GPU's full clock, or
    0 (not given) for one team in four."""
    rng, c = x.rng, x.c
    low, high = rng.choice(((2, 6), (3, 8), (5, 15)))
    return {
        "weights_gb": round(c.weights_bytes_total / 1e9, 1),
        "tp_size": c.tp_size,
        "gpu_memory_gib_per_rank": float(hw.gpu.memory_gib),
        "kv_budget_gib_per_rank": round(
            (cfg.kv_cache_memory_bytes or c.kv_budget_bytes_per_rank) / GiB, 1
        ),
        "kv_bytes_per_token": c.kv_bytes_per_token,
        "prefill_ms_per_token": round(
            c.prefill_cost_per_token_s / x.prefill_factor * 1000 * rng.uniform(0.92, 1.08), 5
        ),
        "decode_step_ms": round(c.decode_step_s * 1000 * rng.uniform(0.92, 1.08), 2),
        "max_num_batched_tokens": sc_chunk,
        "max_num_seqs": cfg.max_num_seqs,
        "ttft_target_ms": x.ttft_target_s * 1000,
        "itl_ceiling_ms": round(x.itl_ceiling_s * 1000),
        "queue_baseline_low": low,
        "queue_baseline_high": high,
        "sm_clock_mhz": 0.0 if rng.random() < 0.25 else float(hw.gpu.sm_clock_mhz),
    }


def _sources(rng: random.Random) -> tuple[str, ...]:
    """Engine metrics in nine deployments of ten (the rest read the log's stats lines),
    dcgm-exporter and logs in four of five."""
    have = [s for s, p in (("engine", 0.9), ("dcgm", 0.8), ("log", 0.8)) if rng.random() < p]
    if "engine" not in have and "log" not in have:
        have.insert(0, "engine")
    return tuple(s for s in SOURCES if s in have)


def draw(scenario: str, seed: int) -> Draw:
    """The ``seed``-th random deployment of ``scenario`` (a name in SINGLES or "a+b")."""
    parts = scenario.split("+")
    if not parts or any(p not in SYMPTOMS for p in parts) or len(parts) > 2:
        raise KeyError(f"unknown drawn scenario {scenario!r}")
    rng = _seed_rng(scenario, seed)
    # A straggler is one rank among several.
    hw = _hardware(rng, 2 if "tp-straggler" in parts else 1)
    c = hw.constants
    fmt = rng.choice(("vllm-v1", "vllm-v1", "vllm-v0", "sglang"))
    layout = rng.choice(tuple(LAYOUTS))
    buckets = LAYOUTS[layout](fmt)
    if buckets is None:
        layout = "default"
    team_chunk = rng.choice((512, 1024, 2048, 2048, 8192))
    seats = rng.choice((16, 32, 48, 64, 128, 256))
    # The KV pool the team's own settings leave (the scaling reads it; the final pool is
    # re-derived from the incident's engine settings below).
    first = EngineConfig(max_num_seqs=seats, max_num_batched_tokens=team_chunk)
    c = replace(c, kv_budget_bytes_per_rank=_kv_budget(c, first, None))
    x = _Ctx(rng, c, seats, team_chunk, rng.uniform(0.3, 0.6))
    # The team's SLOs: an ITL ceiling 1.6-2.4x their mixed step, a TTFT target well above
    # a typical prompt's prefill (both rounded as people round them).
    x.itl_ceiling_s = round(_round_up(rng.uniform(1.5, 2.3) * x.mixed_step_s(), 0.01), 3)
    x.ttft_target_s = round(max(x.ttft_floor_s(770), rng.choice((0.5, 0.6, 0.8, 1.0))), 3)
    built = []
    for part in parts:
        base = scenarios.get(part) if part != "prefill-slow" else _prefill_slow_base()
        built.append(_SCALERS[part](x, base))
    sim = built[0] if len(built) == 1 else scenarios.combine(built[0], built[1])
    # Unchunked prefill needs a budget of max_model_len (vLLM's rule, and the scenario's).
    cfg_extra: dict[str, Any] = {"max_num_seqs": x.seats}
    if "max_num_batched_tokens" not in sim.config:
        # The engine runs the chunk budget the team registers (a setting they typed, not a
        # constant they measured), unless the incident is the engine's own chunk (an
        # oversized or unchunked one). At the simulator's default of 512 under a
        # registered 2,048, a healthy lane ran at 0.8, queued for seconds on every burst
        # and confirmed a backlog, and every prefill read slow against a 2,048-token step.
        cfg_extra["max_num_batched_tokens"] = team_chunk
    if buckets:
        cfg_extra["histogram_buckets"] = tuple(
            (k, tuple(map(float, v))) for k, v in buckets.items()
        )
    sim = replace(sim, config={**sim.config, **cfg_extra})
    cfg = sim.engine_config()
    if x.headroom is not None:
        # A small GPU under a big model: at most half of what start-up leaves is headroom
        # (the rest is the KV pool), so the engine serves before the memory incident.
        x.headroom = min(x.headroom, (c.device_total_bytes - _startup_used(c, cfg)) // 2)
    kv = _kv_budget(c, cfg, x.headroom)
    c = replace(c, kv_budget_bytes_per_rank=kv)
    if x.prefill_factor != 1.0:
        c = replace(c, prefill_cost_per_token_s=c.prefill_cost_per_token_s * x.prefill_factor)
    x.c = c
    if "kv-block-leak" in parts:
        # The deployment with the leak taken out and everything else as drawn: in a pair,
        # the partner stays in. The TTFT alarm is the leak's symptom; set above the peak
        # the partner alone makes (gc pauses at the daily peak lengthen TTFT too), it fires
        # when the leak fills the cache, not minutes before, while the leak holds a few per
        # cent of it and nothing could tell it from none ("kv-block-leak" was then labelled
        # a cause of an alarm the pauses raised, and its elimination counted as an error).
        healthy = replace(sim, config={**sim.config, "kv_leak_fraction": 0.0})
        peak = healthy_peak_ttft_p95(healthy, seed, fmt, c)
        # A team's target holds at its own healthy daily peak (an alarm that fires every
        # peak is raised, not paged on): a quarter above the peak minute's p95.
        x.ttft_target_s = round(max(x.ttft_target_s, _round_up(1.25 * peak, 0.1)), 3)
        x.notes.update(healthy_peak_ttft_p95_s=peak)
    if "kv-pressure" in parts:
        # The same rule for the cache that fills: the team's target holds for their own
        # traffic until the cache first holds a request back (a waiting request finds a
        # seat but no blocks, or a running one is preempted). Long prompts sharing the
        # prefill lane on the ramp crossed the floor above at a KV usage of 0.4 with no
        # queue, and the draw was opened as KV pressure a minute before there was any.
        # The draw's own run (a budget number does not change the simulation); in a pair
        # the partner stays in, as for the leak.
        before = ttft_p95_before_kv_pressure(sim, seed, fmt, c, max(DEADLINE_S[p] for p in parts))
        x.ttft_target_s = round(max(x.ttft_target_s, _round_up(1.25 * before, 0.1)), 3)
        x.notes.update(ttft_p95_before_kv_pressure_s=before)
    symptoms = tuple(dict.fromkeys(s for p in parts for s in SYMPTOMS[p]))
    artifacts = tuple(
        dict.fromkeys(a for s in symptoms for a, p in SYMPTOM_ARTIFACTS[s] if rng.random() < p)
    )
    budget = _team_budget(x, cfg, hw, team_chunk)
    return Draw(
        scenario=scenario,
        seed=seed,
        model=hw.model.name,
        gpu=hw.gpu.name,
        fmt=fmt,
        layout=layout,
        load=x.load,
        constants=c,
        sim=sim,
        budget=budget,
        causes=tuple(sim.causes),
        symptoms=symptoms,
        sources=_sources(rng),
        artifacts=artifacts,
        deadline_s=max(DEADLINE_S[p] for p in parts),
        notes={**x.notes, "seats": x.seats, "kv_capacity_tokens": kv // c.kv_bytes_per_token},
    )


def healthy_peak_ttft_p95(sim: Scenario, seed: int, fmt: str, c: DeploymentConstants) -> float:
    """The largest p95 TTFT over a minute (as SymptomWatch reads it) in the first rate
    period of ``sim``, the incident's deployment with the incident taken out."""
    from enginesim.deployment import Deployment, SimClock

    deployment = Deployment(sim, seed=seed, fmt=fmt, clock=SimClock("manual"), constants=c)
    workload = sim.workload or WorkloadSpec()
    period = workload.rate.period_s or 300.0
    engine = deployment.engines[0]
    history: list[Any] = []
    worst = 0.0
    while deployment.now() < period:
        deployment.advance(WATCH_EVERY_S)
        ttft = engine.metrics.ttft
        history.append(ttft.copy())
        window = ttft.minus(history[max(0, len(history) - 5)])
        if window.count >= 5:
            worst = max(worst, window.quantile(0.95))
    return worst


def ttft_p95_before_kv_pressure(
    sim: Scenario, seed: int, fmt: str, c: DeploymentConstants, until_s: float
) -> float:
    """The largest p95 TTFT over a minute (as SymptomWatch reads it) before the KV cache
    first holds a request back (a KV stall at admission or a preemption), within
    ``until_s``."""
    from enginesim.deployment import Deployment, SimClock

    deployment = Deployment(sim, seed=seed, fmt=fmt, clock=SimClock("manual"), constants=c)
    engine = deployment.engines[0]
    history: list[Any] = []
    worst = 0.0
    while deployment.now() < until_s:
        deployment.advance(WATCH_EVERY_S)
        if engine.sched.kv_stalls or engine.metrics.num_preemptions:
            break
        ttft = engine.metrics.ttft
        history.append(ttft.copy())
        window = ttft.minus(history[max(0, len(history) - 5)])
        if window.count >= 5:
            worst = max(worst, window.quantile(0.95))
    return worst


WATCH_EVERY_S = 15.0


def _prefill_slow_base() -> Scenario:
    return Scenario(
        "prefill-slow",
        "Prefill takes 2-3.5x the wall time the budget gives; queue and KV healthy.",
        ("prefill-slow",),
        fix={},
        signature_by_s=120.0,
    )


class SymptomWatch:
    """When the incident shows, as an external alert (or a paged on-call) would see it:
    from the simulator's own histograms over the last ``window_s``, with the draw's bucket
    layout, against the team's SLOs. Never read by the diagnosis itself."""

    def __init__(self, drawn: Draw, window_s: float = 60.0) -> None:
        self.ttft_target_s = drawn.budget["ttft_target_ms"] / 1000
        self.itl_ceiling_s = drawn.budget["itl_ceiling_ms"] / 1000
        self.window_s = window_s
        self._history: list[tuple[float, Any, Any, Any]] = []
        self._up_since: float | None = None

    def tick(self, deployment: Any) -> set[str]:
        """Call at a steady cadence; returns the symptoms showing now."""
        now = deployment.now()
        engine = deployment.engines[0]
        m = engine.metrics
        self._history.append((now, m, m.ttft.copy(), m.itl.copy()))
        while self._history and self._history[0][0] < now - self.window_s - 1e-6:
            self._history.pop(0)
        _, old_m, old_ttft, old_itl = self._history[0]
        ttft = m.ttft.minus(old_ttft) if old_m is m else m.ttft
        itl = m.itl.minus(old_itl) if old_m is m else m.itl
        showing = set()
        if ttft.count >= 5 and ttft.quantile(0.95) > self.ttft_target_s:
            showing.add("high-ttft")
        if itl.count >= 50 and itl.quantile(0.99) > self.itl_ceiling_s:
            showing.add("itl-spikes")
        if engine.ooms and engine.is_up:
            self._up_since = now if self._up_since is None else self._up_since
            if now - self._up_since >= 20.0:
                showing.add("gpu-oom")
        else:
            self._up_since = None
        return showing
