"""Size an incident's load from what the engine measured in the same run: pure arithmetic.

Fixed arrival rates make an incident depend on the machine: the same 8 requests/s that
overload an engine on a busy 2-core machine are served by it on an idle one, and no alarm
fires. So every load here is a multiple of the engine's *measured* capacity for the
request shape in question, the way a load test is sized against a replica's benchmark:
"overload" is 2x what the engine serves, "healthy" 0.4x, whatever the machine's speed.

The capacity model is the one the calibration measures (``realengine.calibrate``):

- a decode step costs ``decode_step_ms`` for one sequence plus ``decode_step_ms_per_seq``
  for each further sequence in the batch (measured with one and with a batch of streams);
- a request costs ``request_ms`` whatever its length (the intercept of idle TTFT over
  prompt length: HTTP, input processing, scheduling) and a prompt ``prefill_ms_per_token``
  per token;
- at most ``min(seats, KV blocks // blocks a request ends up holding)`` requests run at
  once (the engine's own ``cache_config_info``: KV tokens and block size);
- by Little's law that many requests, each served in ``prefill + output x step(n)``,
  complete ``n / service`` requests per second.

Output lengths are sized in time too (a service of ``service_s`` seconds at the measured
step), so an incident lasts about as long on a slow machine as on a fast one, within the
model's context length. Everything is a function of its arguments: unit-tested without an
engine, and the same calibration always gives the same plan.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from deployments.calibration import decidable_threshold, itl_ceiling_over_tail
from loadgen.plan import LengthMix, PlannedRequest, merge, poisson_plan


class SizingError(ValueError):
    """The measured engine cannot carry the requested shape (say, KV smaller than one request)."""


@dataclass(frozen=True)
class EngineCosts:
    """What the calibration measured (milliseconds) and what the engine reports about its KV."""

    prefill_ms_per_token: float
    decode_step_ms: float  # one sequence
    decode_step_ms_per_seq: float  # each further sequence in the batch (>= 0)
    kv_tokens: int  # cache_config_info kv_cache_size_tokens
    block_size: int  # cache_config_info block_size
    max_model_len: int
    request_ms: float = 0.0  # per request, whatever its length

    def __post_init__(self) -> None:
        if not (self.prefill_ms_per_token >= 0 and self.decode_step_ms > 0):
            raise SizingError("costs must be positive")
        if self.request_ms < 0:
            raise SizingError("the per-request cost cannot be negative")
        if self.decode_step_ms_per_seq < 0:
            raise SizingError("the per-sequence step cost cannot be negative")
        if self.kv_tokens < self.block_size or self.block_size < 1 or self.max_model_len < 2:
            raise SizingError("the engine must hold at least one block")

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    def step_ms(self, batch: int) -> float:
        """One decode step with ``batch`` sequences running."""
        return self.decode_step_ms + self.decode_step_ms_per_seq * max(0, batch - 1)

    def blocks_held(self, tokens: float) -> int:
        """Whole KV blocks a request of ``tokens`` (prompt + output so far) holds."""
        return max(1, math.ceil(tokens / self.block_size))


@dataclass(frozen=True)
class Shape:
    """A request shape: inclusive ranges of prompt and output tokens."""

    prompt: tuple[int, int]
    output: tuple[int, int]

    @property
    def prompt_mean(self) -> float:
        return sum(self.prompt) / 2

    @property
    def output_mean(self) -> float:
        return sum(self.output) / 2

    def mixes(self) -> tuple[LengthMix, LengthMix]:
        return LengthMix(((1.0, *self.prompt),)), LengthMix(((1.0, *self.output),))


@dataclass(frozen=True)
class Capacity:
    """What one engine serves of one shape: concurrency, per-request service, throughput."""

    concurrency: int  # requests running at once (seats or KV, whichever binds)
    bound_by: str  # "seats" | "kv" | "measured" (a full batch served slower than modelled)
    service_s: float  # one request's prefill + decode at that concurrency
    requests_per_s: float

    def as_dict(self) -> dict:
        return {"concurrency": self.concurrency, "bound_by": self.bound_by,
                "service_s": round(self.service_s, 3),
                "requests_per_s": round(self.requests_per_s, 4)}  # fmt: skip


def kv_concurrency(costs: EngineCosts, shape: Shape) -> int:
    """Requests that fit in the KV cache together at their full length (prompt + output)."""
    full = costs.blocks_held(shape.prompt_mean + shape.output_mean)
    fits = costs.kv_blocks // full
    if fits < 1:
        raise SizingError(f"one request of this shape needs {full} blocks, the engine has "
                          f"{costs.kv_blocks}")  # fmt: skip
    return fits


def service_s(costs: EngineCosts, shape: Shape, batch: int) -> float:
    """One request's time in the engine with ``batch`` running: prefill, then its decodes."""
    prefill = costs.request_ms + costs.prefill_ms_per_token * shape.prompt_mean
    return (prefill + shape.output_mean * costs.step_ms(batch)) / 1000


def capacity(costs: EngineCosts, shape: Shape, seats: int) -> Capacity:
    """Throughput of an engine with ``seats`` (max-num-seqs) on requests of ``shape``."""
    if seats < 1:
        raise SizingError("seats must be at least 1")
    kv = kv_concurrency(costs, shape)
    n, bound = (seats, "seats") if seats <= kv else (kv, "kv")
    service = service_s(costs, shape, n)
    return Capacity(n, bound, service, n / service)


def output_for_service(costs: EngineCosts, prompt: tuple[int, int], batch: int, *,
                       service_s: float, low: int, high: int) -> tuple[int, int]:  # fmt: skip
    """An output range (+-10 %) whose decode takes about ``service_s`` seconds at
    ``batch``, clamped to [low, high] and to what fits the model's context."""
    tokens = service_s * 1000 / costs.step_ms(batch)
    room = costs.max_model_len - prompt[1] - 1
    centre = max(low, min(high, room, int(tokens)))
    spread = max(1, centre // 10)
    return max(1, centre - spread), min(room, centre + spread)


@dataclass(frozen=True)
class IncidentLoad:
    """One incident's sized load: the Poisson rate, the shape, and how it was derived."""

    name: str
    shape: Shape
    seats: int  # the engine's max-num-seqs for this incident
    capacity: Capacity
    factor: float  # rate / capacity
    rate_per_s: float
    duration_s: float
    warmup_s: float  # how long the load runs before the diagnosis starts

    def plan(self, seed: int) -> list[PlannedRequest]:
        prompt, output = self.shape.mixes()
        return poisson_plan(self.rate_per_s, prompt=prompt, output=output, seed=seed,
                            duration_s=self.duration_s)  # fmt: skip

    def as_dict(self) -> dict:
        return {"shape": {"prompt": list(self.shape.prompt), "output": list(self.shape.output)},
                "seats": self.seats, "capacity": self.capacity.as_dict(),
                "factor": self.factor, "rate_per_s": round(self.rate_per_s, 4),
                "duration_s": round(self.duration_s, 1),
                "warmup_s": round(self.warmup_s, 1)}  # fmt: skip


# Incident recipes: (shape's prompt range, decode time a request should take, output
# clamps, seats (None: the engine's default), load factor). The factors are the brief's:
# overload is 2x capacity (1.5-2x asked; 2x leaves room for the machine getting faster
# between calibration and incident), healthy is 0.4x (<= 0.5x asked).
OVERLOAD_FACTOR = 2.0
HEALTHY_FACTOR = 0.4
DIAGNOSE_S = 30.0  # two poll cycles 10 s apart plus the CLI's own start on a busy machine


def _sized(name: str, costs: EngineCosts, shape: Shape, seats: int, factor: float, *,
           min_warmup_s: float, fill_fraction: float) -> IncidentLoad:  # fmt: skip
    cap = capacity(costs, shape, seats)
    # Long enough for the symptom to build: ``fill_fraction`` of a request's service (KV
    # fills as requests decode; a queue needs a few service times of excess arrivals).
    warmup = max(min_warmup_s, fill_fraction * cap.service_s)
    return IncidentLoad(name, shape, seats, cap, factor, factor * cap.requests_per_s,
                        duration_s=warmup + DIAGNOSE_S, warmup_s=warmup)  # fmt: skip


def kv_pressure_load(costs: EngineCosts, *, seats: int, service_target_s: float = 6.0,
                     factor: float = OVERLOAD_FACTOR) -> IncidentLoad:  # fmt: skip
    """Incident 1: long-output requests arriving at ``factor`` x what the KV cache lets
    the engine serve, with seats to spare (the engine admits them all and preempts).

    Six seconds of decode per request, not longer: under pressure the engine admits new
    requests only as others finish, and with 12 s requests a 10 s poll interval saw no
    first token at all (p95 TTFT unmeasured, the alarm not judged)."""
    prompt = (250, 350)
    probe = Shape(prompt, (400, 400))
    batch = kv_concurrency(costs, probe)
    output = output_for_service(costs, prompt, batch, service_s=service_target_s, low=150,
                                high=600)  # fmt: skip
    shape = Shape(prompt, output)
    load = _sized("kv-pressure", costs, shape, seats, factor, min_warmup_s=20,
                  fill_fraction=1.0)  # fmt: skip
    if load.capacity.bound_by != "kv":
        raise SizingError(f"{seats} seats bind before the KV cache: no KV pressure possible")
    return load


def overload_load(costs: EngineCosts, *, seats: int = 8, service_target_s: float = 5.0,
                  factor: float = OVERLOAD_FACTOR) -> IncidentLoad:  # fmt: skip
    """Incident 3: short requests at ``factor`` x what ``seats`` serve, KV far from full
    (the seats bind, the queue grows by (factor - 1) x capacity per second)."""
    prompt = (50, 150)
    output = output_for_service(costs, prompt, seats, service_s=service_target_s, low=50,
                                high=300)  # fmt: skip
    load = _sized("overload", costs, Shape(prompt, output), seats, factor, min_warmup_s=20,
                  fill_fraction=2.0)  # fmt: skip
    if load.capacity.bound_by != "seats":
        raise SizingError("the KV cache binds before the seats: this would be KV pressure")
    return load


def healthy_load(costs: EngineCosts, *, seats: int, factor: float = HEALTHY_FACTOR) -> IncidentLoad:
    """Incident 4: mixed short requests at ``factor`` x capacity on the default engine."""
    shape = Shape((100, 300), (50, 150))
    return _sized("healthy", costs, shape, seats, factor, min_warmup_s=10, fill_fraction=1.0)


def wait_probability(seats: int, utilisation: float) -> float:
    """Erlang C: the chance that a Poisson arrival finds every one of ``seats`` taken, at
    ``utilisation`` (arrival rate over what the seats serve, < 1). Computed through Erlang
    B's recursion, which stays finite where the textbook's factorials overflow."""
    if seats < 1:
        raise SizingError("seats must be at least 1")
    if not 0 <= utilisation < 1:
        raise SizingError("a queue that is served needs a utilisation in [0, 1)")
    offered = utilisation * seats
    blocked = 1.0
    for k in range(1, seats + 1):
        blocked = offered * blocked / (k + offered * blocked)
    return seats * blocked / (seats - offered * (1 - blocked))


def utilisation_for_wait(seats: int, share: float) -> float:
    """The highest utilisation at which at most ``share`` of arrivals wait for a seat
    (``wait_probability`` rises with utilisation; bisection to 1e-6)."""
    if not 0 < share < 1:
        raise SizingError("the share of arrivals allowed to wait must be in (0, 1)")
    low, high = 0.0, 1.0 - 1e-9
    while high - low > 1e-6:
        mid = (low + high) / 2
        low, high = (mid, high) if wait_probability(seats, mid) <= share else (low, mid)
    return low


def serving_load(costs: EngineCosts, shape: Shape, *, seats: int, factor: float,
                 duration_s: float, served_per_s: float | None = None,
                 wait_share: float | None = None) -> IncidentLoad:  # fmt: skip
    """A load of ``shape`` at ``factor`` x what ``seats`` serve (fix verification: an
    arrival process the fixed engine can serve). ``served_per_s``: the rate a full batch
    was measured to be served at (``realengine.calibrate.served_per_s``); where it is below
    the modelled capacity, it is the capacity. ``wait_share``: at most this share of the
    arrivals may find every seat taken (Erlang C); the factor is lowered to meet it.

    Why the wait share: a latency SLO on a quantile (p95 TTFT) fails as soon as more than
    1 - q of the requests wait for a seat, and a seat's wait is a fraction of a whole
    request's service. Half of what nine seats serve already makes 4.6 % of arrivals wait,
    and a verification there passed or failed by the luck of its Poisson draw."""
    cap = capacity(costs, shape, seats)
    if served_per_s is not None:
        if served_per_s <= 0:
            raise SizingError("a measured serving rate must be positive")
        if served_per_s < cap.requests_per_s:
            cap = dataclasses.replace(cap, bound_by="measured", requests_per_s=served_per_s)
    if wait_share is not None:
        factor = min(factor, utilisation_for_wait(cap.concurrency, wait_share))
    return IncidentLoad("serving", shape, seats, cap, factor, factor * cap.requests_per_s,
                        duration_s=duration_s, warmup_s=0.0)  # fmt: skip


@dataclass(frozen=True)
class PrefillIncident:
    """Incident 2: long prompts landing among decode streams, and the ITL ceiling that
    tells one big prefill step from a chunk of the intended budget."""

    decode: IncidentLoad
    prefill: IncidentLoad
    intended_chunk: int
    itl_ceiling_ms: float
    step_with_chunk_ms: float  # a decode step carrying one intended chunk
    step_with_prompt_ms: float  # a decode step carrying a whole long prompt
    # What one long prompt costs each engine, all in (ms): unfixed, one step carrying it
    # whole; fixed, that plus a decode step for every further chunk.
    prompt_cost_unfixed_ms: float = 0.0
    prompt_cost_fixed_ms: float = 0.0
    # Shares of each engine's time the prompts (and the decodes' own requests) take.
    busy_unfixed: float = 0.0
    busy_fixed: float = 0.0
    prompt_step_share: float = 0.0  # unfixed steps carrying a whole prompt, of all steps

    @property
    def duration_s(self) -> float:
        return max(self.decode.duration_s, self.prefill.duration_s)

    @property
    def warmup_s(self) -> float:
        return max(self.decode.warmup_s, self.prefill.warmup_s)

    def plan(self, seed: int) -> list[PlannedRequest]:
        return merge(self.decode.plan(seed), self.prefill.plan(seed + 1))

    def as_dict(self) -> dict:
        return {"decode": self.decode.as_dict(), "prefill": self.prefill.as_dict(),
                "intended_chunk": self.intended_chunk,
                "itl_ceiling_ms": round(self.itl_ceiling_ms, 1),
                "step_with_chunk_ms": round(self.step_with_chunk_ms, 1),
                "step_with_prompt_ms": round(self.step_with_prompt_ms, 1),
                "prompt_cost_unfixed_ms": round(self.prompt_cost_unfixed_ms, 1),
                "prompt_cost_fixed_ms": round(self.prompt_cost_fixed_ms, 1),
                "busy_unfixed": round(self.busy_unfixed, 3),
                "busy_fixed": round(self.busy_fixed, 3),
                "prompt_step_share": round(self.prompt_step_share, 4)}  # fmt: skip


# How many of the unfixed engine's steps should carry a whole long prompt: a p99 ITL sees
# what more than one step in a hundred does, and at 1.3 % (an earlier run: 196 ms prompts
# among 10 ms steps) it read 50 ms against an 89 ms ceiling. Three in a hundred is 3x the
# p99's share; two the least an incident may be sized with.
PROMPT_STEP_SHARE = 0.03
MIN_PROMPT_STEP_SHARE = 0.02
# The most of the chunking (fixed) engine's time the long prompts may take. The fix is
# verified on an engine that must keep up: a chunked prompt costs a decode step per chunk
# on top of its prefill, so the same arrivals weigh more on the fixed engine, and at ~1.3x
# its capacity (2026-12-07's "0.4 share" of bare prefill, 12 prompts a second) its p99 ITL
# read the backlog (123 ms against a 25 ms ceiling). At 0.7 an M/D/1 queue waits about a
# service time on average.
FIXED_BUSY_MAX = 0.7


# How close to either engine's tail a bucket bound may sit and still serve as the ITL
# ceiling when none lies in the middle third: a tenth of room on each side.
SNAP_ROOM = 1.1


def prefill_load(
    costs: EngineCosts,
    *,
    intended_chunk: int = 256,
    long_prompt: tuple[int, int] = (1600, 1900),
    decode_streams: int = 8,
    prompt_step_share: float = PROMPT_STEP_SHARE,
    fixed_busy_max: float = FIXED_BUSY_MAX,
    prompt_served_ms: float | None = None,
    loaded_step_ms: float | None = None,
    service_target_s: float = 6.0,
    run_s: float = 40.0,
    tail_floor_ms: float | None = None,
    itl_bounds_ms: Sequence[float] = (),
) -> PrefillIncident:
    """Incident 2, sized from the calibration:

    - ``decode_streams`` short-prompt streams decoding for ``service_target_s`` each at
      the calibration's step (clamped to 600 tokens), arriving so that that many are in
      flight at the pace the mix with the prompts below serves them (Little's law);
    - long prompts arriving so that ``prompt_step_share`` of the unfixed engine's steps
      carry one whole (what its p99 ITL must see), unless that would keep the *fixed*
      engine busier than ``fixed_busy_max``; then as many as that allows, and
      ``SizingError`` below ``MIN_PROMPT_STEP_SHARE``. A long prompt costs the unfixed
      engine its request cost, its prefill and the one decode step that carries it (or
      ``prompt_served_ms``, what a burst of them measured on the engine, when that is
      more: a loaded API server and the load generator share the machine), and the fixed
      engine that plus a decode step for every further chunk of ``intended_chunk``. Both
      engines must keep up: the alarm is about the steps' composition, and a backlog's ITL
      (KV churn, batches swelling) would verify nothing. A decode step costs the
      calibration's ``step_ms(decode_streams)``, or ``loaded_step_ms`` (the engine's mean
      ITL with the decode streams running) when that is more: eight streams of a tiny
      model stream thousands of tokens a second through the API server, which shares the
      machine with the engine's own steps;
    - the ITL ceiling halfway (geometrically) between a step carrying one intended chunk
      and a step carrying a whole long prompt: the intended budget fits under it, the
      unchunked step does not, whatever the machine's speed; and at least 1.5x
      ``tail_floor_ms``, the engine's p99 ITL with a batch decoding and no prefill at all
      (calibration): a ceiling under that is about the machine, not about prefill (one
      run put it at 42 ms with the machine's own tail at 46 ms); on a bound of the
      engine's ITL histogram (``itl_bounds_ms``) where one lies in the middle third.
    """
    prompt = (32, 64)
    output = output_for_service(costs, prompt, decode_streams, service_s=service_target_s,
                                low=50, high=600)  # fmt: skip
    decode_shape = Shape(prompt, output)
    decode_cap = capacity(costs, decode_shape, decode_streams)
    decode = IncidentLoad("prefill-decodes", decode_shape, decode_streams, decode_cap,
                          factor=1.0, rate_per_s=decode_streams / decode_cap.service_s,
                          duration_s=run_s, warmup_s=min(20.0, run_s / 2))  # fmt: skip
    long_shape = Shape(long_prompt, (4, 8))
    if long_prompt[1] + 8 > costs.max_model_len:
        raise SizingError(f"a {long_prompt[1]}-token prompt does not fit max-model-len "
                          f"{costs.max_model_len}")  # fmt: skip
    if not (0 < fixed_busy_max < 1 and 0 < prompt_step_share < 1):
        raise SizingError("busy and step shares must lie between 0 and 1")
    prompt_ms = costs.prefill_ms_per_token * long_shape.prompt_mean
    step = max(costs.step_ms(decode_streams), loaded_step_ms or 0.0)
    unfixed_cost = max(costs.request_ms + prompt_ms + step, prompt_served_ms or 0.0)
    fixed_cost = unfixed_cost + (math.ceil(long_prompt[1] / intended_chunk) - 1) * step
    # Unfixed, a prompt takes one step and the rest of the time is plain decode steps:
    # at ``rate`` prompts a second, rate + (1 - decode_busy - rate x cost) / step steps,
    # solved for the rate at which ``prompt_step_share`` of them carry a prompt. Among
    # them a decode stream gets one token a step, at the unfixed engine's steps a second
    # (the chunking engine runs more, shorter steps): its service there keeps
    # ``decode_streams`` in flight. Sized from a bare step instead, the streams arrived
    # at twice the rate the mix serves them, their batch swelled towards the KV cache's
    # limit and the unfixed engine queued (p95 TTFT 1.8 s over 30 s). The decodes' own
    # requests (their HTTP, their short prefill) take ``decode_busy`` first, which the
    # streams' rate sets in turn: a few rounds settle it (it is ~1 % of the time).
    share = prompt_step_share
    decode_request_ms = costs.request_ms + costs.prefill_ms_per_token * decode_shape.prompt_mean
    decode_rate = decode.rate_per_s
    for _ in range(8):
        decode_busy = decode_rate * decode_request_ms / 1000
        if decode_busy >= fixed_busy_max:
            raise SizingError(f"the decode streams alone keep the engine {decode_busy:.0%} busy")
        free_steps = (1 - decode_busy) * 1000 / step
        rate = share * free_steps / (1 - share + share * unfixed_cost / step)
        rate = min(rate, (fixed_busy_max - decode_busy) * 1000 / fixed_cost)
        busy_unfixed = decode_busy + rate * unfixed_cost / 1000
        steps_per_s = rate + (1 - busy_unfixed) * 1000 / step
        mixed_s = (decode_request_ms + decode_shape.output_mean * 1000 / steps_per_s) / 1000
        decode_rate = decode_streams / mixed_s
    busy_fixed = decode_busy + rate * fixed_cost / 1000
    prompt_steps = rate / steps_per_s
    if prompt_steps < MIN_PROMPT_STEP_SHARE * 0.999:
        raise SizingError(f"only {prompt_steps:.1%} of the steps could carry a prompt with the "
                          f"fixed engine {busy_fixed:.0%} busy: a p99 ITL would not see them "
                          f"(a {step:.1f} ms step, {unfixed_cost:.0f} ms prompts)")  # fmt: skip
    mixed = Capacity(decode_streams, "seats", mixed_s, decode_rate)
    decode = dataclasses.replace(decode, capacity=mixed, rate_per_s=decode_rate)
    long_cap = capacity(costs, long_shape, decode_streams)
    prefill = IncidentLoad("prefill-prompts", long_shape, decode_streams, long_cap,
                           factor=rate / long_cap.requests_per_s, rate_per_s=rate,
                           duration_s=run_s, warmup_s=decode.warmup_s)  # fmt: skip
    chunk_ms = costs.prefill_ms_per_token * intended_chunk
    with_chunk = step + chunk_ms
    with_prompt = step + prompt_ms
    # The p99s the two engines will show: the machine's own tail with no prefill (the
    # OS descheduling the engine), plus what a step's prefill adds. Fixed, most steps
    # carry a chunk (the prefill lane is busy); unfixed, the slowest carry a prompt.
    # Measured on a 2-core machine: tail 20-23 ms, chunk 7 ms, prompt 47 ms; p99 25-34 ms
    # fixed, 85-97 ms unfixed. A ceiling between the bare steps (11 and 51 ms: 30 ms)
    # sat under the fixed engine's tail.
    tail = tail_floor_ms or 0.0
    fixed_tail = max(with_chunk, tail + chunk_ms)
    unfixed_tail = max(with_prompt, tail + prompt_ms)
    ceiling = math.sqrt(fixed_tail * unfixed_tail)
    floor = itl_ceiling_over_tail(tail_floor_ms) if tail_floor_ms is not None else 0.0
    # On a bound of the engine's ITL buckets within the middle third (log scale) of the
    # two tails: the p99 against it is then decided by bucket counts, not interpolated
    # (decidable_threshold). A step carrying one chunk of 7.5 ms and one carrying a whole
    # prompt of 40 ms put the geometric middle at 17 ms, inside vLLM's 10-25 ms bucket,
    # where fixed engines "read" 21-25 ms; 25 ms is a bound the counts decide.
    # Where no bound lies in the middle third, one within SNAP_ROOM of either tail still
    # beats a ceiling inside a bucket: a CI run's fixed engine read 38.9 ms in the 25-50 ms
    # bucket against a 42 ms geometric ceiling, a verdict the counts could not give, where
    # 50 ms (1.3x under the unfixed tail) would have been decided.
    third = (unfixed_tail / fixed_tail) ** (1 / 3)
    snapped = decidable_threshold(ceiling, itl_bounds_ms, max(fixed_tail * third, floor),
                                  unfixed_tail / third)  # fmt: skip
    if snapped is None:
        snapped = decidable_threshold(ceiling, itl_bounds_ms,
                                      max(fixed_tail * SNAP_ROOM, floor),
                                      unfixed_tail / SNAP_ROOM)  # fmt: skip
    ceiling = snapped if snapped is not None else max(ceiling, floor)
    if ceiling >= unfixed_tail:
        raise SizingError(f"the machine's ITL tail ({tail_floor_ms or 0:.0f} ms) hides a "
                          f"{with_prompt:.0f} ms prefill step")  # fmt: skip
    return PrefillIncident(decode, prefill, intended_chunk, ceiling, with_chunk, with_prompt,
                           prompt_cost_unfixed_ms=unfixed_cost, prompt_cost_fixed_ms=fixed_cost,
                           busy_unfixed=busy_unfixed, busy_fixed=busy_fixed,
                           prompt_step_share=prompt_steps)  # fmt: skip
