"""Pure step-time model: how long one engine step takes given what it carries.

step = max_rank_slowdown * (decode_step + prefill_tokens * cost_per_token + attention(context))
       + scheduling overhead (+ eager launch overhead when the shape has no CUDA graph)

GPU work is gated by the slowest TP rank (every step ends in an all-reduce); CPU work is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from enginesim.config import DeploymentConstants


@dataclass(slots=True)
class StepCost:
    total_s: float
    gpu_s: float
    prefill_s: float
    decode_s: float
    attention_s: float
    cpu_s: float


def step_cost(
    c: DeploymentConstants,
    *,
    prefill_tokens: int,
    num_decode: int,
    context_tokens: int,
    num_seqs: int,
    cuda_graph: bool,
    rank_slowdown: float = 1.0,
) -> StepCost:
    """Cost of one step; any step with work pays the full decode floor (weights read once)."""
    if prefill_tokens <= 0 and num_decode <= 0:
        return StepCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    prefill = prefill_tokens * c.prefill_cost_per_token_s
    decode = c.decode_step_s
    attention = context_tokens * c.attention_cost_per_context_token_s
    gpu = (prefill + decode + attention) * rank_slowdown
    cpu = c.sched_overhead_s + num_seqs * c.sched_overhead_per_seq_s
    if not cuda_graph:
        cpu += c.eager_launch_overhead_s
    return StepCost(gpu + cpu, gpu, prefill, decode, attention, cpu)


def mixed_step_ceiling_s(c: DeploymentConstants, max_num_batched_tokens: int) -> float:
    """The playbook's arithmetic: decode step + full chunk * cost per token (63 ms at 512)."""
    return c.decode_step_s + max_num_batched_tokens * c.prefill_cost_per_token_s
