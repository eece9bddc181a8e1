"""Deployment constants and engine configuration.

Defaults are the playbook's "Atlas" numbers. The playbook writes "GB" but does its KV arithmetic
in binary units (35 * 1024 * 1024 / 320 = 114,688 tokens), so sizes here are GiB/KiB throughout.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


class ConfigError(ValueError):
    """A configuration value is out of its valid range."""


# vLLM's --custom-histogram-buckets families that enginesim renders (engine-metrics.md §1.3).
BUCKET_FAMILIES = frozenset(
    {"time_to_first_token", "inter_token_latency", "request_latency", "iteration_tokens"}
)


@dataclass(frozen=True)
class DeploymentConstants:
    """Physical constants of one deployment: what the budget arithmetic is made of."""

    weights_bytes_total: int = 140 * GiB
    tp_size: int = 4
    kv_bytes_per_token: int = 320 * KiB  # per rank, as the playbook's arithmetic uses it
    kv_budget_bytes_per_rank: int = 35 * GiB
    prefill_cost_per_token_s: float = 0.035e-3
    decode_step_s: float = 0.045
    # Attention over live context: modest so that a typical decode step stays near 48 ms.
    attention_cost_per_context_token_s: float = 1.5e-8
    # CPU-side work per step: scheduling, sampling, detokenising and streaming.
    sched_overhead_s: float = 0.0012
    sched_overhead_per_seq_s: float = 0.00002
    # Running a batch shape that has no captured CUDA graph costs extra launch time.
    eager_launch_overhead_s: float = 0.004
    ttft_target_s: float = 0.600
    itl_ceiling_s: float = 0.150
    # Device (A100-SXM4-80GB: the playbook's 1,410 MHz SM clock).
    device_total_bytes: int = 80 * GiB
    device_name: str = "NVIDIA A100-SXM4-80GB"
    sm_clock_max_mhz: int = 1410
    mem_clock_mhz: int = 1593
    power_idle_w: float = 62.0
    power_max_w: float = 400.0
    non_torch_bytes: int = 600 * MiB  # CUDA context, NCCL buffers
    activation_base_bytes: int = 2 * GiB
    activation_bytes_per_batched_token: int = 1 * MiB  # peak activations grow with the step budget
    warmup_graph_pool_base_bytes: int = 256 * MiB
    warmup_graph_pool_bytes_per_size: int = 8 * MiB

    def __post_init__(self) -> None:
        if self.tp_size < 1:
            raise ConfigError("tp_size must be >= 1")
        for name in ("weights_bytes_total", "kv_bytes_per_token", "kv_budget_bytes_per_rank"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.decode_step_s <= 0 or self.prefill_cost_per_token_s <= 0:
            raise ConfigError("step costs must be positive")

    @property
    def weights_bytes_per_rank(self) -> int:
        return self.weights_bytes_total // self.tp_size

    @property
    def kv_capacity_tokens(self) -> int:
        """Live KV tokens one rank can hold: the number the walkthroughs compute (114,688)."""
        return self.kv_budget_bytes_per_rank // self.kv_bytes_per_token


def default_capture_sizes(max_num_seqs: int, max_size: int | None = None) -> tuple[int, ...]:
    """vLLM's inferred capture list: [1, 2, 4] + range(8, 256, 8) + range(256, max+1, 16)."""
    cap = max_size if max_size is not None else min(max_num_seqs * 2, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, cap + 1, 16)]
    return tuple(s for s in sizes if s <= cap)


@dataclass(frozen=True)
class EngineConfig:
    """Engine (vLLM CLI-level) settings plus the fault knobs scenarios turn on.

    The fault knobs (`capture_on_the_fly`, `kv_leak_fraction`, ...) are not vLLM flags; they are the
    simulated defects that a scenario injects and a fix removes.
    """

    model_name: str = "atlas-70b"
    max_num_seqs: int = 40
    max_num_batched_tokens: int = 512
    enable_chunked_prefill: bool = True
    block_size: int = 16
    enable_prefix_caching: bool = False
    # vLLM's --kv-cache-memory-bytes: the KV pool per rank, instead of the deployment's
    # budget (still shrunk by start-up profiling if it does not fit).
    kv_cache_memory_bytes: int | None = None
    max_model_len: int = 32768
    enforce_eager: bool = False
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    priority_scheduling: bool = False
    # Defects.
    capture_on_the_fly: bool = False  # uncaptured shapes get a new graph pool instead of eager
    # Shapes above this run eager even with on-the-fly capture, as vLLM runs every batch above
    # its largest capture size: the defect covers mixed batches, not whole unchunked prompts.
    on_the_fly_max_tokens: int = 4096
    on_the_fly_pad_tokens: int = 256
    on_the_fly_pool_bytes_min: int = int(1.5 * GiB)
    on_the_fly_pool_bytes_max: int = int(2.5 * GiB)
    kv_leak_fraction: float = 0.0  # finished requests whose blocks never return to the pool
    allocator_leak_bytes_per_s: float = 0.0
    gc_gen2_pause_s: float = 0.0008  # pause of a full collection with a small heap
    gc_gen0_every_steps: int = 10
    gc_gen1_every_gen0: int = 10
    gc_gen2_every_gen1: int = 10
    gc_frozen: bool = False  # gc.freeze() + manual collection when idle
    restart_downtime_s: float = 45.0
    stats_interval_s: float = 5.0
    # Histogram bucket bounds by vLLM's --custom-histogram-buckets family names
    # (time_to_first_token, inter_token_latency, request_latency, iteration_tokens):
    # ((family, bounds), ...); a family not named keeps the engine format's default.
    histogram_buckets: tuple[tuple[str, tuple[float, ...]], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ConfigError("max_num_seqs must be >= 1")
        if self.max_num_batched_tokens < 1:
            raise ConfigError("max_num_batched_tokens must be >= 1")
        if self.block_size < 1:
            raise ConfigError("block_size must be >= 1")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            # vLLM refuses this too: without chunking every prompt must fit one step.
            raise ConfigError(
                "max_num_batched_tokens must be >= max_model_len when chunked prefill is disabled"
            )
        if not 0.0 <= self.kv_leak_fraction <= 1.0:
            raise ConfigError("kv_leak_fraction must be in [0, 1]")
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes <= 0:
            raise ConfigError("kv_cache_memory_bytes must be positive")
        if self.on_the_fly_pool_bytes_min > self.on_the_fly_pool_bytes_max:
            raise ConfigError("on_the_fly_pool_bytes_min > max")
        for family, bounds in self.histogram_buckets:
            if family not in BUCKET_FAMILIES:
                raise ConfigError(f"unknown histogram family {family!r}")
            if not bounds or list(bounds) != sorted(set(bounds)):
                raise ConfigError(f"{family} buckets must be strictly increasing")
        if self.cudagraph_capture_sizes is not None and any(
            s < 1 for s in self.cudagraph_capture_sizes
        ):
            raise ConfigError("capture sizes must be >= 1")

    @functools.cached_property
    def capture_sizes(self) -> tuple[int, ...]:
        """Sorted CUDA-graph capture sizes (empty in eager mode); cached, read every step."""
        if self.enforce_eager:
            return ()
        if self.cudagraph_capture_sizes is not None:
            return tuple(sorted(set(self.cudagraph_capture_sizes)))
        return default_capture_sizes(self.max_num_seqs)

    def replace(self, **changes: Any) -> EngineConfig:
        if "cudagraph_capture_sizes" in changes and changes["cudagraph_capture_sizes"] is not None:
            changes["cudagraph_capture_sizes"] = tuple(
                int(s) for s in changes["cudagraph_capture_sizes"]
            )
        return dataclasses.replace(self, **changes)


# Fix keys accepted by the control endpoint. Values: (field, type, needs_restart).
FIX_FIELDS: dict[str, tuple[type, bool]] = {
    "max_num_seqs": (int, False),
    "max_num_batched_tokens": (int, False),
    "enable_chunked_prefill": (bool, False),
    "enable_prefix_caching": (bool, True),
    "priority_scheduling": (bool, False),
    "enforce_eager": (bool, True),
    "cudagraph_capture_sizes": (list, True),
    "capture_on_the_fly": (bool, True),
    "kv_leak_fraction": (float, True),
    "allocator_leak_bytes_per_s": (float, True),
    "gc_frozen": (bool, False),
}
