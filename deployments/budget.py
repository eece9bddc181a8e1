"""The deployment's budget arithmetic: what the numbers *should* be.

Pure functions over a ``Budget`` (the constants a deployment carries). Evaluation
compares observations with these expectations ("prefill within 25 % of tokens x
cost"), and fix templates compute their parameters from them ("the max-num-seqs
that keeps KV occupancy under 80 %"). Units are in the names: GiB and KiB are
binary, GB is decimal as model cards quote weights, times are milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024**3
GB = 1000**3


@dataclass(frozen=True)
class Budget:
    weights_gb: float = 140.0
    tp_size: int = 4
    gpu_memory_gib_per_rank: float = 80.0
    kv_budget_gib_per_rank: float = 35.0
    kv_bytes_per_token: int = 320 * 1024
    prefill_ms_per_token: float = 0.035
    decode_step_ms: float = 45.0
    max_num_batched_tokens: int = 512
    max_num_seqs: int = 40
    ttft_target_ms: float = 600.0
    itl_ceiling_ms: float = 150.0
    queue_baseline_low: int = 3
    queue_baseline_high: int = 8
    # The GPUs' full SM clock under load (A100: 1,410 MHz); 0 means "not given": the GPU
    # model's own full clock is used (expected.full_sm_clock_mhz).
    sm_clock_mhz: float = 1410.0

    def __post_init__(self) -> None:
        if self.tp_size < 1 or self.kv_bytes_per_token < 1:
            raise ValueError("tp_size and kv_bytes_per_token must be positive")
        for name in ("kv_budget_gib_per_rank", "prefill_ms_per_token", "decode_step_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    @classmethod
    def of(cls, deployment) -> Budget:
        """The budget a Deployment row carries."""
        return cls(**{name: getattr(deployment, name) for name in cls.__dataclass_fields__})


def kv_capacity_tokens(budget: Budget) -> int:
    """Tokens of live KV state one rank holds: KV budget / bytes per token.

    Each rank holds its share of every token's KV (heads are split across TP ranks),
    and the playbook quotes per-token KV as that per-rank share: 35 GiB / 320 KiB =
    114,688 tokens.
    """
    return int(budget.kv_budget_gib_per_rank * GIB // budget.kv_bytes_per_token)


def kv_occupancy(budget: Budget, sequences: int, avg_tokens: float) -> float:
    """Fraction of KV capacity a batch of ``sequences`` x ``avg_tokens`` holds."""
    return sequences * avg_tokens / kv_capacity_tokens(budget)


def prefill_cost_ms(budget: Budget, prompt_tokens: int) -> float:
    """Prefill compute for a prompt processed in one shot."""
    return prompt_tokens * budget.prefill_ms_per_token


def chunk_cost_ms(budget: Budget, chunk_tokens: int | None = None) -> float:
    """Prefill work one chunk adds to an engine step (the chunk budget by default)."""
    tokens = budget.max_num_batched_tokens if chunk_tokens is None else chunk_tokens
    return tokens * budget.prefill_ms_per_token


def prefill_steps(budget: Budget, prompt_tokens: int) -> int:
    """Engine steps a prompt crosses under the chunk budget."""
    return max(1, math.ceil(prompt_tokens / budget.max_num_batched_tokens))


def mixed_step_ceiling_ms(budget: Budget, chunk_tokens: int | None = None) -> float:
    """Longest a mixed step should take: decode step + a full chunk of prefill."""
    return budget.decode_step_ms + chunk_cost_ms(budget, chunk_tokens)


def kv_budget_gib_for_capacity(budget: Budget, capacity_tokens: float) -> float:
    """The KV budget per rank that makes ``kv_capacity_tokens`` equal an engine's reported
    capacity, at the budget's own KV bytes per token (a property of the model that the
    engine's metrics do not give: its ``kv_cache_memory_bytes`` is a request, not the
    pool actually allocated)."""
    if capacity_tokens <= 0:
        raise ValueError("capacity_tokens must be positive")
    return capacity_tokens * budget.kv_bytes_per_token / GIB


def max_num_seqs_for_occupancy(
    budget: Budget, avg_tokens: float, target: float = 0.8, *, capacity_tokens: float | None = None
) -> int:
    """The largest max-num-seqs whose full batch stays strictly under ``target`` occupancy.

    ``avg_tokens`` should be the context a sequence reaches, not the prompt: sequences
    grow while they decode. (The playbook's incident picks 28 for 2,800-token
    sequences, which leaves more headroom than the 32 this bound allows.)
    ``capacity_tokens``: the engine's own KV capacity where it reports one, else the
    budget's.
    """
    if avg_tokens <= 0 or not 0 < target <= 1:
        raise ValueError("avg_tokens must be positive and target in (0, 1]")
    capacity = kv_capacity_tokens(budget) if capacity_tokens is None else capacity_tokens
    allowed = target * capacity / avg_tokens
    seqs = math.ceil(allowed) - 1 if allowed == int(allowed) else math.floor(allowed)
    return max(1, seqs)


def max_chunk_for_itl(
    budget: Budget, ceiling_ms: float | None = None, *, multiple: int = 256
) -> int:
    """The largest chunk budget (a multiple of ``multiple`` tokens) whose mixed-step
    ceiling stays within the ITL ceiling."""
    ceiling = budget.itl_ceiling_ms if ceiling_ms is None else ceiling_ms
    headroom = ceiling - budget.decode_step_ms
    if headroom <= 0 or budget.prefill_ms_per_token <= 0:
        return 0
    tokens = int(headroom / budget.prefill_ms_per_token)
    return tokens // multiple * multiple


def weights_per_rank_gb(budget: Budget) -> float:
    return budget.weights_gb / budget.tp_size


def memory_margin_gib(
    budget: Budget, *, activations_gib: float = 0.0, graph_pool_gib: float = 0.0
) -> float:
    """Device memory left per rank after weights shard, KV budget, activations and CUDA-graph
    pools: the room any growing component eats before the next allocation spike OOMs."""
    weights_gib = weights_per_rank_gb(budget) * GB / GIB
    return (
        budget.gpu_memory_gib_per_rank
        - weights_gib
        - budget.kv_budget_gib_per_rank
        - activations_gib
        - graph_pool_gib
    )
