"""Which simulated incidents make a drill, and the symptom each one raises.

A trainee is told the symptom (what the pager would say), never the scenario. The symptom
of each scenario is the one an on-call would open from (tests/matrix/cases.py, measured);
scenarios whose evidence a drill range cannot collect are left out: ``router-slow`` shows
only through a Prometheus server scraping the router, and ``healthy`` raises nothing.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

RANDOM = "random"


@dataclass(frozen=True)
class DrillCase:
    symptom: str
    # The deployment's registered budget where it differs from the Atlas defaults (the
    # kv-pressure engine runs a 2,048-token chunk budget), as the matrix registers it.
    budget: Mapping[str, int] = field(default_factory=dict)


CASES: Mapping[str, DrillCase] = MappingProxyType(
    {
        "kv-pressure": DrillCase("high-ttft", {"max_num_batched_tokens": 2048}),
        "kv-block-leak": DrillCase("high-ttft"),
        "prefill-unchunked": DrillCase("itl-spikes"),
        "long-prefill-itl": DrillCase("itl-spikes"),
        "gc-pauses": DrillCase("itl-spikes"),
        "tp-straggler": DrillCase("itl-spikes"),
        "graph-pool-growth": DrillCase("gpu-oom"),
        "allocator-leak": DrillCase("gpu-oom"),
    }
)
# Every budget field some case overrides: a drill resets the others to their defaults.
BUDGET_FIELDS = frozenset(k for case in CASES.values() for k in case.budget)


class UnknownScenario(ValueError):
    """Not a scenario a drill can run."""


def choices() -> list[str]:
    return sorted(CASES)


def case_for(name: str) -> DrillCase:
    """The drill case of one scenario, or of a pair "a+b" (opened from a's symptom; a's
    budget wins where both register one, as in the matrix)."""
    parts = name.split("+")
    if len(parts) > 2 or len(set(parts)) != len(parts) or not all(p in CASES for p in parts):
        raise UnknownScenario(
            f"{name!r} is not a drill scenario; pick one of {', '.join(choices())} "
            f"(or two joined by +), or {RANDOM!r}"
        )
    cases = [CASES[p] for p in parts]
    budget = {k: v for case in reversed(cases) for k, v in case.budget.items()}
    return DrillCase(cases[0].symptom, budget)


def pick(choice: str, seed: int) -> str:
    """The scenario to run: ``choice`` itself, or a seeded draw among the single scenarios."""
    if choice == RANDOM:
        return random.Random(seed).choice(choices())
    case_for(choice)
    return choice
