"""The scenario x playbook matrix: which symptom each simulated incident raises, when an
on-call would open the investigation, and what evidence (targets, profiler artifacts) the
deployment offers. Ground truth comes from the simulator's scenario, never from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

from enginesim import scenarios
from investigations.playbook import playbooks

ENGINE, DCGM, LOG = "/metrics", "/dcgm/metrics", "/logs"
TRACE = "/profiler/trace?mode=last&steps=400"
SNAPSHOT = "/profiler/memory_snapshot?rank=0"
GC_LOG = "/profiler/gc_log"


@dataclass(frozen=True)
class Case:
    symptoms: tuple[str, ...]
    open_at_s: float  # simulated seconds: when the symptom is there to be noticed
    artifacts: tuple[str, ...] = ()
    targets: tuple[str, ...] = (ENGINE, DCGM, LOG)
    # The deployment's registered constants where they differ from the Atlas defaults
    # (walkthrough 1's engine runs a 2,048-token chunk budget).
    budget: dict = field(default_factory=dict)


CASES: dict[str, Case] = {
    "kv-pressure": Case(("high-ttft",), 300, budget={"max_num_batched_tokens": 2048}),
    "prefill-unchunked": Case(("itl-spikes",), 180, (TRACE,)),
    "graph-pool-growth": Case(("gpu-oom",), 900, (SNAPSHOT,)),
    "kv-block-leak": Case(("high-ttft",), 1080),
    "allocator-leak": Case(("gpu-oom",), 300, (SNAPSHOT,)),
    "long-prefill-itl": Case(("itl-spikes",), 120, (TRACE,)),
    "gc-pauses": Case(("itl-spikes",), 120, (GC_LOG,)),
    "tp-straggler": Case(("itl-spikes",), 60),
}
# router-slow needs a Prometheus server in front of the router's metrics: tested on its own.
PAIRS = [f"{a}+{b}" for a, b in combinations(sorted(CASES), 2)]


def case_of(name: str) -> Case:
    parts = name.split("+")
    cases = [CASES[p] for p in parts]
    symptoms = tuple(dict.fromkeys(s for c in cases for s in c.symptoms))
    return Case(
        symptoms,
        max(c.open_at_s for c in cases),
        tuple(dict.fromkeys(a for c in cases for a in c.artifacts)),
        budget={k: v for c in reversed(cases) for k, v in c.budget.items()},
    )


def truth(name: str) -> set[str]:
    return {cause for part in name.split("+") for cause in scenarios.get(part).causes}


def causes_of(symptom: str) -> set[str]:
    return {node.key for node in playbooks()[symptom].walk() if node.is_cause}
