"""Request arrival process: a non-homogeneous Poisson process with seeded length distributions.

Each replica draws from its own `random.Random`, seeded from (scenario seed, replica index), so a
replica's request stream does not depend on how many other replicas exist or when HTTP requests
arrive.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RateProfile:
    """Piecewise-linear arrival rate (requests/s per replica) over simulated seconds.

    `knots` are (t_s, rate) pairs; before the first knot the first rate holds, after the last the
    last rate holds, unless `period_s` is set, in which case the profile repeats (a compressed
    day: peak and off-peak).
    """

    knots: tuple[tuple[float, float], ...] = ((0.0, 2.0),)
    period_s: float | None = None

    def __post_init__(self) -> None:
        if not self.knots:
            raise ValueError("a rate profile needs at least one knot")
        ts = [t for t, _ in self.knots]
        if ts != sorted(ts) or any(r < 0 for _, r in self.knots):
            raise ValueError("knots must be time-ordered with non-negative rates")

    @classmethod
    def constant(cls, rate: float) -> RateProfile:
        return cls(((0.0, rate),))

    def rate_at(self, t: float) -> float:
        if self.period_s:
            t = t % self.period_s
        ts = [k[0] for k in self.knots]
        i = bisect.bisect_right(ts, t)
        if i == 0:
            return self.knots[0][1]
        if i == len(self.knots):
            return self.knots[-1][1]
        (t0, r0), (t1, r1) = self.knots[i - 1], self.knots[i]
        if t1 == t0:
            return r1
        return r0 + (r1 - r0) * (t - t0) / (t1 - t0)

    @property
    def max_rate(self) -> float:
        return max(r for _, r in self.knots)


@dataclass(frozen=True)
class LengthDist:
    """Log-normal token length, clipped: the usual shape of prompt and output lengths."""

    median: float
    sigma: float = 0.6
    lo: int = 1
    hi: int = 32768

    def sample(self, rng: random.Random) -> int:
        v = self.median * math.exp(rng.gauss(0.0, self.sigma))
        return max(self.lo, min(self.hi, round(v)))


@dataclass(frozen=True)
class WorkloadSpec:
    """What traffic one replica sees."""

    rate: RateProfile = RateProfile(((0.0, 2.0),))
    prompt: LengthDist = LengthDist(median=700, sigma=0.5, lo=16, hi=4000)
    output: LengthDist = LengthDist(median=180, sigma=0.6, lo=4, hi=1500)
    # A fraction of requests with a long prompt (documents, RAG contexts).
    long_prompt_fraction: float = 0.0
    long_prompt_lo: int = 4096
    long_prompt_hi: int = 8192
    long_prompts_are_priority: bool = False
    # Shared system-prompt prefix (what a prefix cache can reuse).
    shared_prefix_tokens: int = 0
    # Fraction of requests that stop at max_tokens rather than at EOS.
    length_finish_fraction: float = 0.15


@dataclass(slots=True)
class Arrival:
    """One request as the client sends it."""

    arrival_s: float
    prompt_len: int
    output_len: int
    max_tokens: int
    priority: bool
    prefix_len: int
    finish_reason: str


class ArrivalProcess:
    """Lazily generated arrivals (thinning), deterministic for a given seed."""

    def __init__(self, spec: WorkloadSpec, rng: random.Random, max_model_len: int) -> None:
        self.spec = spec
        self.rng = rng
        self.max_model_len = max_model_len
        self._t = 0.0
        self._next: Arrival | None = None

    def set_spec(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self._next = None

    def peek(self) -> Arrival | None:
        """The next arrival (None if the rate is zero forever)."""
        if self._next is None:
            self._next = self._draw()
        return self._next

    def pop(self) -> Arrival:
        a = self.peek()
        assert a is not None
        self._next = None
        return a

    def _draw(self) -> Arrival | None:
        spec = self.spec
        lam = spec.rate.max_rate
        if lam <= 0:
            return None
        rng = self.rng
        t = self._t
        for _ in range(100000):
            t += rng.expovariate(lam)
            if rng.random() * lam <= spec.rate.rate_at(t):
                break
        else:  # pragma: no cover - only with a near-zero rate everywhere
            return None
        self._t = t
        priority = False
        if spec.long_prompt_fraction and rng.random() < spec.long_prompt_fraction:
            prompt = rng.randint(spec.long_prompt_lo, spec.long_prompt_hi)
            priority = spec.long_prompts_are_priority
        else:
            prompt = spec.prompt.sample(rng)
        output = spec.output.sample(rng)
        prompt = max(1, min(prompt, self.max_model_len - output - 1))
        if rng.random() < spec.length_finish_fraction:
            reason, max_tokens = "length", output
        else:
            reason, max_tokens = "stop", max(output, 2048)
        prefix = min(spec.shared_prefix_tokens, prompt - 1) if spec.shared_prefix_tokens else 0
        return Arrival(t, prompt, output, max_tokens, priority, prefix, reason)
