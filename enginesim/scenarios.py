"""Named, documented, parameterised incident scenarios.

A scenario is a set of *causes* injected into the model (traffic shape, engine settings, defects),
never a set of painted numbers: the symptoms come out of the scheduler, step-time and memory
models. Each scenario carries its ground truth (stable cause keys, primary first) and the fix
that removes the cause, so tests and drills can check diagnosis and verification.

Combinations: "a+b" applies both scenarios' causes (engine settings merge; traffic keeps the more
specific rate profile, request lengths and long-prompt class of the two, see _merge_workloads) and
needs both fixes. Pairs whose incidents would hide each other at the single defaults have their
own defaults (PAIR_DEFAULTS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from enginesim.config import EngineConfig, GiB
from enginesim.workload import LengthDist, RateProfile, WorkloadSpec

CAUSE_KEYS = (
    "router-latency",
    "queue-backlog",
    "prefill-slow",
    "kv-cache-pressure",
    "cuda-graph-pool-growth",
    "kv-block-leak",
    "allocator-leak",
    "oversized-prefill-chunks",
    "gc-pauses",
    "tp-straggler",
    "gpu-throttling",
)


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    causes: tuple[str, ...]
    config: dict[str, Any] = field(default_factory=dict)
    workload: WorkloadSpec | None = None
    router_extra_s: float = 0.0
    straggler: dict[int, int] = field(default_factory=dict)  # rank -> throttled SM MHz
    straggler_replicas: tuple[int, ...] = (0,)
    fix: dict[str, Any] = field(default_factory=dict)
    signature_by_s: float = 300.0  # simulated seconds within which the signature shows
    params: dict[str, float] = field(default_factory=dict)
    # When the incident is visible, in simulated seconds from the start of the traffic's
    # cycle (None: from signature_by_s on, for as long as it runs). Measured, not designed:
    # the demo's "incident in progress" clock reads it.
    incident_s: tuple[float, float] | None = None

    def engine_config(self, base: EngineConfig | None = None) -> EngineConfig:
        return (base or EngineConfig()).replace(**self.config)

    def workload_spec(self) -> WorkloadSpec:
        return self.workload or WorkloadSpec()

    def truth(self) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "summary": self.summary,
            "causes": list(self.causes),
            "primary_cause": self.causes[0] if self.causes else None,
            "fix": dict(self.fix),
            "params": dict(self.params),
        }


Builder = Callable[[dict[str, float]], Scenario]
_REGISTRY: dict[str, tuple[dict[str, float], Builder]] = {}


def _register(name: str, defaults: dict[str, float]) -> Callable[[Builder], Builder]:
    def deco(fn: Builder) -> Builder:
        _REGISTRY[name] = (defaults, fn)
        return fn

    return deco


@_register("healthy", {"rate": 2.0})
def _healthy(p: dict[str, float]) -> Scenario:
    """Steady traffic well inside capacity: p95 TTFT under target, KV usage well below 80 %."""
    return Scenario(
        "healthy",
        "Steady traffic inside capacity; every SLO met.",
        (),
        workload=WorkloadSpec(rate=RateProfile.constant(p["rate"])),
    )


@_register(
    "kv-pressure",
    {
        "base_rate": 0.4,
        "peak_rate": 1.25,
        "plateau_rate": 0.35,
        "ramp_start_s": 30,
        "ramp_s": 150,
        "prompt_median": 2400,
        "output_median": 700,
    },
)
def _kv_pressure(p: dict[str, float]) -> Scenario:
    """Walkthrough 1. A Monday-morning ramp of long conversations (~2,400-token prompts, ~500
    output tokens) fills 40 seats; 40 x ~2,800 live tokens is ~97 % of the 114,688-token KV pool,
    so decoders run out of blocks, the newest request is preempted by recompute and re-queued,
    admissions stall and the queue grows. Fix: max_num_seqs=28 keeps occupancy under 80 %."""
    t0, ramp = p["ramp_start_s"], p["ramp_s"]
    rate = RateProfile(
        (
            (0.0, p["base_rate"]),
            (t0, p["base_rate"]),
            (t0 + ramp, p["peak_rate"]),
            (t0 + ramp + 120.0, p["peak_rate"]),
            (t0 + ramp + 240.0, p["plateau_rate"]),
        )
    )
    wl = WorkloadSpec(
        rate=rate,
        prompt=LengthDist(median=p["prompt_median"], sigma=0.25, lo=256, hi=4500),
        output=LengthDist(median=p["output_median"], sigma=0.35, lo=16, hi=1800),
    )
    return Scenario(
        "kv-pressure",
        "Traffic ramp of long sequences exhausts KV blocks: preemptions, queue backlog, high TTFT.",
        ("kv-cache-pressure",),
        config={"max_num_seqs": 40, "max_num_batched_tokens": 2048},
        workload=wl,
        fix={"max_num_seqs": 28},
        signature_by_s=t0 + ramp + 120.0,
        params=p,
        # Measured, seeds 0-3 x five 1,200 s loops at the defaults: more than 8 waiting
        # (the budget's queue baseline) from 140-230 s (median ~167 s) until 385-565 s
        # (median ~490 s). The medians, so the clock is as often early as late.
        incident_s=(t0 + ramp - 15.0, t0 + ramp + 310.0),
    )


@_register("router-slow", {"rate": 2.0, "router_delay_s": 0.12})
def _router_slow(p: dict[str, float]) -> Scenario:
    """The router adds ~120 ms before requests reach a healthy engine (client TTFT rises, engine
    TTFT does not). Fix: router_extra_delay_s=0."""
    return Scenario(
        "router-slow",
        "Router forwarding latency dominates; the engines are healthy.",
        ("router-latency",),
        workload=WorkloadSpec(rate=RateProfile.constant(p["rate"])),
        router_extra_s=p["router_delay_s"],
        fix={"router_extra_delay_s": 0.0},
        signature_by_s=60.0,
        params=p,
    )


@_register("prefill-unchunked", {"rate": 1.2, "long_fraction": 0.25})
def _prefill_unchunked(p: dict[str, float]) -> Scenario:
    """Chunked prefill off: an 8k-16k-token prompt runs in one step (16,000 x 0.035 ms = 560 ms),
    stalling every decode. The limit case of an oversized chunk (the whole prompt is the chunk),
    so its cause key is oversized-prefill-chunks: per-request prefill is not slow (tokens x cost),
    the steps that carry it are. Fix: enable chunked prefill with a 512-token budget."""
    return Scenario(
        "prefill-unchunked",
        "Long prompts prefilled in one shot stall decode (TTFT and ITL tails).",
        ("oversized-prefill-chunks",),
        config={
            "enable_chunked_prefill": False,
            "max_num_batched_tokens": 16384,
            "max_model_len": 16384,
        },
        workload=WorkloadSpec(
            rate=RateProfile.constant(p["rate"]),
            long_prompt_fraction=p["long_fraction"],
            long_prompt_lo=8000,
            long_prompt_hi=15000,
        ),
        fix={"enable_chunked_prefill": True, "max_num_batched_tokens": 512},
        signature_by_s=180.0,
        params=p,
    )


@_register("graph-pool-growth", {"rate": 2.0, "long_fraction": 0.004})
def _graph_pool_growth(p: dict[str, float]) -> Scenario:
    """Walkthrough 2. Captures cover up to 512 tokens; a rare long prompt produces a bigger mixed
    batch, which the engine captures on the fly into a new 1.5-2.5 GiB private pool. Reserved
    memory steps up with each capture until a CUDA OOM restarts the engine. Fix: eager mode."""
    return Scenario(
        "graph-pool-growth",
        "Rare batch shapes captured on the fly grow CUDA-graph pools until CUDA OOM.",
        ("cuda-graph-pool-growth",),
        config={
            "max_num_batched_tokens": 4096,
            "cudagraph_capture_sizes": tuple(
                s for s in (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
            ),
            "capture_on_the_fly": True,
        },
        workload=WorkloadSpec(
            rate=RateProfile.constant(p["rate"]),
            prompt=LengthDist(median=220, sigma=0.4, lo=16, hi=400),
            long_prompt_fraction=p["long_fraction"],
            long_prompt_lo=600,
            long_prompt_hi=4000,
        ),
        fix={"enforce_eager": True},
        signature_by_s=900.0,
        params=p,
    )


@_register("kv-block-leak", {"peak_rate": 2.2, "offpeak_rate": 0.4, "period_s": 300, "leak": 0.05})
def _kv_block_leak(p: dict[str, float]) -> Scenario:
    """Finished requests sometimes keep their blocks (refcount never drops): KV usage ratchets up
    from one off-peak trough to the next. Fix: the leak fix + restart (kv_leak_fraction=0)."""
    per = p["period_s"]
    rate = RateProfile(
        ((0.0, p["offpeak_rate"]), (per * 0.5, p["peak_rate"]), (per, p["offpeak_rate"])),
        period_s=per,
    )
    return Scenario(
        "kv-block-leak",
        "KV blocks of finished requests are never freed; usage ratchets up even off-peak.",
        ("kv-block-leak",),
        config={"kv_leak_fraction": p["leak"]},
        workload=WorkloadSpec(rate=rate),
        fix={"kv_leak_fraction": 0.0},
        signature_by_s=per * 2,
        params=p,
    )


@_register("allocator-leak", {"rate": 2.0, "leak_mib_per_s": 24})
def _allocator_leak(p: dict[str, float]) -> Scenario:
    """Allocated (not just reserved) memory grows monotonically, idle or not, until CUDA OOM."""
    return Scenario(
        "allocator-leak",
        "Allocated memory grows monotonically (a tensor leak) until CUDA OOM.",
        ("allocator-leak",),
        config={"allocator_leak_bytes_per_s": p["leak_mib_per_s"] * 1024 * 1024},
        workload=WorkloadSpec(rate=RateProfile.constant(p["rate"])),
        fix={"allocator_leak_bytes_per_s": 0.0},
        signature_by_s=300.0,
        params=p,
    )


@_register("long-prefill-itl", {"rate": 1.2, "long_fraction": 0.33})
def _long_prefill_itl(p: dict[str, float]) -> Scenario:
    """Walkthrough 3. Priority requests with 4k-10k-token prompts jump the queue and, with an
    8,192-token step budget, are prefilled in one chunk: 4,096 x 0.035 ms adds ~143 ms to the step
    and every decoding request sees it as ITL (p99 ~300 ms, median ~48 ms).
    Fix: max_num_batched_tokens=512 caps a mixed step near 45 + 18 = 63 ms."""
    return Scenario(
        "long-prefill-itl",
        "Oversized priority prefill chunks stretch steps: p99 ITL ~300 ms, median healthy.",
        ("oversized-prefill-chunks",),
        config={"max_num_batched_tokens": 8192, "priority_scheduling": True},
        workload=WorkloadSpec(
            rate=RateProfile.constant(p["rate"]),
            long_prompt_fraction=p["long_fraction"],
            long_prompt_lo=4096,
            long_prompt_hi=10240,
            long_prompts_are_priority=True,
        ),
        fix={"max_num_batched_tokens": 512},
        signature_by_s=120.0,
        params=p,
    )


@_register("gc-pauses", {"rate": 2.0, "gen2_pause_s": 0.12})
def _gc_pauses(p: dict[str, float]) -> Scenario:
    """A large Python heap makes full collections take ~120 ms inside the engine loop; the step
    that hosts one becomes a 160-180 ms ITL spike. Fix: gc.freeze() and collect when idle."""
    return Scenario(
        "gc-pauses",
        "Generation-2 GC pauses in the engine loop create 160-180 ms ITL spikes.",
        ("gc-pauses",),
        config={
            "gc_gen2_pause_s": p["gen2_pause_s"],
            "gc_gen0_every_steps": 5,
            "gc_gen1_every_gen0": 4,
            "gc_gen2_every_gen1": 3,
        },
        workload=WorkloadSpec(rate=RateProfile.constant(p["rate"])),
        fix={"gc_frozen": True},
        signature_by_s=120.0,
        params=p,
    )


@_register("tp-straggler", {"rate": 2.0, "throttled_mhz": 1200, "rank": 2})
def _tp_straggler(p: dict[str, float]) -> Scenario:
    """One TP rank is thermally throttled (1,200 vs 1,410 MHz); every all-reduce waits for it,
    so every step is ~17 % longer on that replica. Fix: clear the straggler (cooling/drain)."""
    return Scenario(
        "tp-straggler",
        "One thermally throttled TP rank slows every step of its replica.",
        ("tp-straggler", "gpu-throttling"),
        workload=WorkloadSpec(rate=RateProfile.constant(p["rate"])),
        straggler={int(p["rank"]): int(p["throttled_mhz"])},
        fix={"clear_straggler": True},
        signature_by_s=60.0,
        params=p,
    )


def _merge_configs(a: Scenario, b: Scenario) -> dict[str, Any]:
    """Union of settings; on a conflict the scenario whose fix names the key (its cause) wins."""
    merged = {**b.config, **a.config}
    for sc in (a, b):
        for key in sc.fix:
            if key in sc.config:
                merged[key] = sc.config[key]
    return merged


def _shaped(w: WorkloadSpec) -> bool:
    """Traffic whose shape over time is the cause (a ramp, a daily cycle), not a constant."""
    return len({rate for _, rate in w.rate.knots}) > 1 or w.rate.period_s is not None


_GENERIC = WorkloadSpec()


def _specific(w: WorkloadSpec) -> int:
    """How much of a scenario's traffic is its cause: a shape over time counts most, then
    request lengths of its own (graph-pool-growth's short prompts keep mixed batches inside
    the captured sizes; kv-pressure's long conversations fill the KV cache)."""
    lengths = (w.prompt, w.output) != (_GENERIC.prompt, _GENERIC.output)
    return 2 * _shaped(w) + lengths


def _merge_workloads(a: Scenario, b: Scenario) -> WorkloadSpec | None:
    """Both causes stay active: the rate profile of the more specific traffic (a's on a
    tie), request lengths from whichever traffic has its own (the more specific one's when
    both have), and the larger long-prompt class of the two."""
    wa = a.workload if a.name != "healthy" else None
    wb = b.workload if b.name != "healthy" else None
    if wa is None or wb is None:
        return wa or wb or a.workload or b.workload
    if _specific(wb) > _specific(wa):
        wa, wb = wb, wa
    merged = wa
    if (wa.prompt, wa.output) == (_GENERIC.prompt, _GENERIC.output):
        merged = replace(merged, prompt=wb.prompt, output=wb.output)
    if wb.long_prompt_fraction > wa.long_prompt_fraction:
        merged = replace(
            merged,
            long_prompt_fraction=wb.long_prompt_fraction,
            long_prompt_lo=wb.long_prompt_lo,
            long_prompt_hi=wb.long_prompt_hi,
            long_prompts_are_priority=wb.long_prompts_are_priority,
        )
    return merged


# Pairs whose incidents would hide each other at the single scenarios' defaults run with
# their own defaults (explicit params still win). Each entry says why; the README's pair
# table has the timeline. Keys are the two scenario names.
PAIR_DEFAULTS: dict[frozenset[str], dict[str, float]] = {
    # 24 MiB/s exhausts the ~5.7 GiB headroom at ~4 min, in the middle of the Monday ramp's
    # preemption storm; at 16 MiB/s the first OOM (~6.5 min) follows the storm it would wipe.
    frozenset({"allocator-leak", "kv-pressure"}): {"leak_mib_per_s": 16},
    # An 8,192-token budget reserves 6 GiB of activations, leaving ~2.8 GiB: 24 MiB/s OOMs
    # at ~2 min, before the priority prefills' ITL tails can be measured.
    frozenset({"allocator-leak", "long-prefill-itl"}): {"leak_mib_per_s": 8},
    # Unchunked 16k-token steps reserve 10 GiB of activations; start-up profiling leaves the
    # engine 0.5 GiB, which 24 MiB/s eats in ~20 s (down two thirds of the time). At 2 MiB/s
    # (still 4x the snapshot's 512 KiB/s floor) the first OOM comes at ~4 min.
    frozenset({"allocator-leak", "prefill-unchunked"}): {"leak_mib_per_s": 2},
    # The Monday ramp fills the cache by itself; 5 % leaked finishes hold > 30 % of it by
    # ~4 min, and then usage is no longer what the running requests hold (the playbook rules
    # seat pressure out). At 3 % the leak holds 15-30 % through the storm: both visible.
    frozenset({"kv-block-leak", "kv-pressure"}): {"leak": 0.03},
    # Each OOM restart returns the leaked blocks: the KV leak must fill the cache within one
    # allocator-leak cycle, and grow back within the next. 8 MiB/s OOMs at ~14.5 min; 10 %
    # leaked finishes fill the cache by ~12 min and hold > 30 % of it ~4 min after a restart.
    frozenset({"allocator-leak", "kv-block-leak"}): {"leak_mib_per_s": 8, "leak": 0.1},
    # Each capture OOM returns the leaked blocks, so the leak must fill the cache before the
    # graph pools fill the device. With ~400-token requests 15 % leaked finishes fill the
    # 30 GiB cache (PAIR_CONFIG) in ~17 min; one long prompt in 500 (not 250) brings the
    # new batch shapes after the first minutes half as often, so the fifth pool, the one
    # that no longer fits, tends to come after the leak has filled the cache.
    frozenset({"graph-pool-growth", "kv-block-leak"}): {"leak": 0.15, "long_fraction": 0.002},
}

# Engine settings of a pair's deployment where the two scenarios' settings cannot coexist.
PAIR_CONFIG: dict[frozenset[str], dict[str, Any]] = {
    # Unchunked 16k-token steps reserve 10 GiB of activations; with the 35 GiB KV budget,
    # start-up profiling leaves 0.5 GiB, and the first on-the-fly capture (1.5-2.5 GiB) OOMs
    # within seconds of every start. Pinning the KV cache at 29 GiB (--kv-cache-memory-bytes)
    # leaves the ~4.7 GiB graph-pool-growth has alone: two or three captures, then the OOM.
    frozenset({"graph-pool-growth", "prefill-unchunked"}): {"kv_cache_memory_bytes": 29 * GiB},
    # With the 35 GiB KV budget the ~4.7 GiB left holds two on-the-fly pools: the engine
    # OOMs every 2-7 min and every restart hands the leaked blocks back. Pinning the cache
    # at 30 GiB leaves ~9.7 GiB, four pools: the OOM comes after the leak has filled the
    # (smaller) cache, typically when the stalled queue drains in new batch shapes.
    frozenset({"graph-pool-growth", "kv-block-leak"}): {"kv_cache_memory_bytes": 30 * GiB},
}


def names() -> list[str]:
    return list(_REGISTRY)


def describe() -> list[tuple[str, str, dict[str, float]]]:
    """(name, one-line summary, default parameters) for every registered scenario."""
    return [(name, fn(dict(d)).summary, dict(d)) for name, (d, fn) in _REGISTRY.items()]


def looped(sc: Scenario, loop_s: float) -> Scenario:
    """``sc`` with its traffic repeating every ``loop_s`` simulated seconds (a compressed
    day, Monday after Monday) on the same engines: counters, logs and any fix carry over, so
    the history before each alarm is the engine's own. A loop shorter than the traffic's
    last change would cut the incident off, so it is refused."""
    wl = sc.workload_spec()
    last = wl.rate.knots[-1][0]
    if loop_s <= last:
        raise ValueError(
            f"a loop of {loop_s:g} s cuts {sc.name}'s traffic (it changes until {last:g} s)"
        )
    if sc.incident_s is not None and loop_s <= sc.incident_s[1]:
        raise ValueError(
            f"a loop of {loop_s:g} s ends before {sc.name}'s incident does ({sc.incident_s[1]:g} s)"
        )
    return replace(sc, workload=replace(wl, rate=replace(wl.rate, period_s=loop_s)))


def get(name: str, params: dict[str, float] | None = None) -> Scenario:
    """A scenario by name; "a+b" combines two. Unknown params are an error (typos hide bugs)."""
    params = dict(params or {})
    parts = name.split("+")
    if len(parts) > 2:
        raise KeyError("at most two scenarios can be combined")
    pair = PAIR_DEFAULTS.get(frozenset(parts), {}) if len(parts) == 2 else {}
    built = []
    for part in parts:
        if part not in _REGISTRY:
            raise KeyError(f"unknown scenario {part!r}; try --list")
        defaults, fn = _REGISTRY[part]
        p = {k: pair.get(k, v) for k, v in defaults.items()}
        for k in list(params):
            if k in defaults:
                p[k] = float(params[k])
        built.append(fn(p))
    used = {k for part in parts for k in _REGISTRY[part][0]}
    unknown = set(params) - used
    if unknown:
        raise KeyError(f"unknown scenario parameter(s): {sorted(unknown)}")
    if len(built) == 1:
        return built[0]
    first, second = built  # a pair: two incidents, never more
    return combine(first, second, PAIR_CONFIG.get(frozenset(parts), {}))


def combine(a: Scenario, b: Scenario, config: dict[str, Any] | None = None) -> Scenario:
    """Two incidents at once (both causes active, both fixes needed); ``config``: the
    pair's own engine settings where the two cannot coexist. Public so that scenarios
    built elsewhere (enginesim.draws) pair by the same rules as the named ones."""
    return replace(
        a,
        name=f"{a.name}+{b.name}",
        summary=f"{a.summary} + {b.summary}",
        causes=tuple(dict.fromkeys(a.causes + b.causes)),
        config={**_merge_configs(a, b), **(config or {})},
        workload=_merge_workloads(a, b),
        router_extra_s=max(a.router_extra_s, b.router_extra_s),
        straggler={**a.straggler, **b.straggler},
        fix={**a.fix, **b.fix},
        signature_by_s=max(a.signature_by_s, b.signature_by_s),
        params={**a.params, **b.params},
    )
