"""What to send and when: Poisson schedules, length mixtures, priorities, recorded traces.

Pure and seeded: the same arguments give the same plan, so an incident and its fix can
be driven by the same arrival process (the one the fixed engine must serve), and a
trace recorded once replays identically.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

MAX_REQUESTS = 100_000
MAX_TRACE_BYTES = 16 * 1024 * 1024
MAX_TRACE_LINE = 4096
MAX_TOKENS_PER_REQUEST = 1 << 20


class PlanError(ValueError):
    """A mixture, schedule or trace that cannot be used; the message says why."""


@dataclass(frozen=True)
class PlannedRequest:
    seq: int
    at_s: float  # seconds after the start of the run
    prompt_tokens: int
    max_tokens: int
    priority: int = 0


@dataclass(frozen=True)
class LengthMix:
    """Weighted ranges of token counts: ``((weight, low, high), ...)``, inclusive bounds."""

    parts: tuple[tuple[float, int, int], ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise PlanError("a length mixture needs at least one part")
        for weight, low, high in self.parts:
            if not (weight > 0 and math.isfinite(weight)):
                raise PlanError(f"weight {weight} must be positive")
            if not 1 <= low <= high <= MAX_TOKENS_PER_REQUEST:
                raise PlanError(f"range {low}-{high} must satisfy 1 <= low <= high")

    @classmethod
    def fixed(cls, tokens: int) -> LengthMix:
        return cls(((1.0, tokens, tokens),))

    @classmethod
    def parse(cls, text: str) -> LengthMix:
        """``"0.8:64-256,0.2:900"``: weight:low-high (weight 1 and low=high by default)."""
        parts = []
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            weight_text, sep, span = item.rpartition(":")
            low_text, _, high_text = span.partition("-")
            try:
                weight = float(weight_text) if sep else 1.0
                low = int(low_text)
                high = int(high_text) if high_text else low
            except ValueError:
                raise PlanError(f"cannot read length mixture part {item!r}") from None
            parts.append((weight, low, high))
        return cls(tuple(parts))

    def sample(self, rng: random.Random) -> int:
        weights = [w for w, _, _ in self.parts]
        _, low, high = rng.choices(self.parts, weights=weights)[0]
        return rng.randint(low, high)

    def mean(self) -> float:
        total = sum(w for w, _, _ in self.parts)
        return sum(w * (low + high) / 2 for w, low, high in self.parts) / total


def parse_priorities(text: str) -> tuple[tuple[float, int], ...]:
    """``"0.9:0,0.1:-1"``: weight:priority (vLLM serves lower values first)."""
    out = []
    for item in text.split(","):
        if not item.strip():
            continue
        weight_text, sep, value_text = item.strip().rpartition(":")
        try:
            weight = float(weight_text) if sep else 1.0
            value = int(value_text)
        except ValueError:
            raise PlanError(f"cannot read priority part {item!r}") from None
        if not (weight > 0 and math.isfinite(weight)):
            raise PlanError(f"weight {weight} must be positive")
        out.append((weight, value))
    if not out:
        raise PlanError("a priority mixture needs at least one part")
    return tuple(out)


def poisson_plan(
    rate_per_s: float,
    *,
    prompt: LengthMix,
    output: LengthMix,
    seed: int = 0,
    count: int | None = None,
    duration_s: float | None = None,
    priorities: Sequence[tuple[float, int]] = ((1.0, 0),),
) -> list[PlannedRequest]:
    """Poisson arrivals at ``rate_per_s``, stopping at ``count`` requests or ``duration_s``
    seconds (whichever comes first; at least one must be given)."""
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise PlanError("rate must be a positive number of requests per second")
    if count is None and duration_s is None:
        raise PlanError("give a count or a duration (the plan must be bounded)")
    limit = MAX_REQUESTS if count is None else count
    if not 0 < limit <= MAX_REQUESTS:
        raise PlanError(f"count must be between 1 and {MAX_REQUESTS}")
    if duration_s is not None and not (duration_s > 0 and math.isfinite(duration_s)):
        raise PlanError("duration must be positive")
    rng = random.Random(seed)
    weights = [w for w, _ in priorities]
    values = [p for _, p in priorities]
    plan: list[PlannedRequest] = []
    at = 0.0
    while len(plan) < limit:
        at += rng.expovariate(rate_per_s)
        if duration_s is not None and at > duration_s:
            break
        plan.append(
            PlannedRequest(
                seq=len(plan),
                at_s=at,
                prompt_tokens=prompt.sample(rng),
                max_tokens=output.sample(rng),
                priority=rng.choices(values, weights=weights)[0],
            )
        )
    return plan


def _trace_entry(n: int, data: object) -> PlannedRequest:
    if not isinstance(data, dict):
        raise PlanError(f"trace line {n}: expected an object")
    try:
        at = float(data["at_s"])
        prompt = int(data["prompt_tokens"])
        output = int(data["max_tokens"])
        priority = int(data.get("priority", 0))
    except (KeyError, TypeError, ValueError):
        raise PlanError(f"trace line {n}: needs at_s, prompt_tokens, max_tokens") from None
    if not (math.isfinite(at) and at >= 0):
        raise PlanError(f"trace line {n}: at_s must be a non-negative number")
    if not (1 <= prompt <= MAX_TOKENS_PER_REQUEST and 1 <= output <= MAX_TOKENS_PER_REQUEST):
        raise PlanError(f"trace line {n}: token counts out of range")
    return PlannedRequest(n, at, prompt, output, priority)


def load_trace(text: str) -> list[PlannedRequest]:
    """A recorded trace: JSON lines of ``{"at_s", "prompt_tokens", "max_tokens",
    "priority"?}``, replayed in arrival order. Bounded in size, lines and line length."""
    if len(text) > MAX_TRACE_BYTES:
        raise PlanError(f"trace larger than {MAX_TRACE_BYTES} bytes")
    if "\x00" in text:
        raise PlanError("trace contains NUL bytes")
    plan = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_TRACE_LINE:
            raise PlanError(f"trace line {len(plan)} longer than {MAX_TRACE_LINE} characters")
        if len(plan) >= MAX_REQUESTS:
            raise PlanError(f"trace has more than {MAX_REQUESTS} requests")
        try:
            data = json.loads(line)
        except ValueError:
            raise PlanError(f"trace line {len(plan)}: not JSON") from None
        plan.append(_trace_entry(len(plan), data))
    plan.sort(key=lambda r: (r.at_s, r.seq))
    return [PlannedRequest(i, r.at_s, r.prompt_tokens, r.max_tokens, r.priority)
            for i, r in enumerate(plan)]  # fmt: skip


def dump_trace(plan: Iterable[PlannedRequest]) -> str:
    """The trace format ``load_trace`` reads."""
    lines = []
    for r in plan:
        entry = {k: v for k, v in asdict(r).items() if k != "seq"}
        entry["at_s"] = round(entry["at_s"], 6)
        lines.append(json.dumps(entry, sort_keys=True))
    return "\n".join(lines) + ("\n" if lines else "")


def prompt_ids(seed: int, seq: int, tokens: int, vocab: int) -> list[int]:
    """Distinct random token ids per request (no shared prefixes for a prefix cache to
    hit), avoiding the first few ids that tokenizers reserve for special tokens."""
    rng = random.Random(f"{seed}:{seq}")
    return [rng.randrange(3, vocab) for _ in range(tokens)]


def merge(*plans: Sequence[PlannedRequest]) -> list[PlannedRequest]:
    """Several traffic classes as one plan (e.g. long-prompt requests arriving among
    decode-heavy ones, each class its own Poisson stream), renumbered in arrival order."""
    joined = sorted((r for plan in plans for r in plan), key=lambda r: r.at_s)
    if len(joined) > MAX_REQUESTS:
        raise PlanError(f"merged plan has more than {MAX_REQUESTS} requests")
    return [PlannedRequest(i, r.at_s, r.prompt_tokens, r.max_tokens, r.priority)
            for i, r in enumerate(joined)]  # fmt: skip
