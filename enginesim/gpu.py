"""Per-rank GPU state: clocks, utilisation, temperature, power, and the memory budget.

Memory per rank (what walkthrough 2 reasons about):
    used = non-torch (context, NCCL) + reserved
    reserved = weights shard + KV pool + activation reserve (peak seen) + CUDA-graph pools + leaks
    allocated = weights + KV pool + current activations + graph static buffers + leaks
An on-the-fly capture adds a private pool that stays reserved for the process lifetime; an
activation or capture that does not fit the device raises a (simulated) CUDA OOM.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from enginesim.config import DeploymentConstants, EngineConfig, GiB, MiB

TELEMETRY_WINDOW_S = 1.0  # simulated seconds per telemetry window
STARTUP_HEADROOM_BYTES = 512 * MiB


@dataclass
class GraphPool:
    time_s: float
    num_tokens: int
    pool_bytes: int
    after_warmup: bool


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass
class Rank:
    """One TP rank's device."""

    index: int
    uuid: str
    pci_bus_id: str
    throttled_clock_mhz: int | None = None
    # Telemetry (windowed, then smoothed).
    util: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0
    temp_c: float = 34.0
    energy_mj: float = 0.0
    power_w: float = 62.0


@dataclass
class RankMemoryState:
    """Memory components of one rank (all ranks of a TP group are symmetric here)."""

    total: int
    non_torch: int
    weights: int
    kv_pool: int
    activation_reserved: int
    activation_allocated: int = 0
    graph_pools: list[GraphPool] = field(default_factory=list)
    leaked: int = 0
    leaked_series: list[tuple[float, int]] = field(default_factory=list)
    oom_at_s: float | None = None

    @property
    def graph_pool_bytes(self) -> int:
        return sum(p.pool_bytes for p in self.graph_pools)

    @property
    def reserved(self) -> int:
        return (
            self.weights
            + self.kv_pool
            + self.activation_reserved
            + self.graph_pool_bytes
            + self.leaked
        )

    @property
    def allocated(self) -> int:
        graph_static = self.graph_pool_bytes // 8
        return self.weights + self.kv_pool + self.activation_allocated + graph_static + self.leaked

    @property
    def used(self) -> int:
        return self.non_torch + self.reserved

    @property
    def free(self) -> int:
        return max(0, self.total - self.used)


class CudaOOM(Exception):
    """A simulated `torch.OutOfMemoryError`."""

    def __init__(self, tried: int, free: int, state: RankMemoryState) -> None:
        super().__init__(f"tried to allocate {tried} bytes with {free} free")
        self.tried = tried
        self.free = free
        self.state = state


class GpuGroup:
    """The TP ranks of one replica."""

    def __init__(
        self,
        constants: DeploymentConstants,
        replica: int,
        hostname: str,
        seed: int,
    ) -> None:
        self.c = constants
        self.replica = replica
        self.hostname = hostname
        self.ranks = [
            Rank(
                index=i,
                uuid=_uuid(f"{seed}:{hostname}:{replica}:{i}"),
                pci_bus_id=f"00000000:{0x0D + 0x10 * i:02X}:00.0",
            )
            for i in range(constants.tp_size)
        ]
        self.mem = self._fresh_memory(EngineConfig())
        self._slow_key: tuple[int | None, ...] | None = None
        self._slow: tuple[float, ...] = ()

    # ------------------------------------------------------------------ memory
    def activation_peak_bytes(self, cfg: EngineConfig) -> int:
        return self.c.activation_base_bytes + cfg.max_num_batched_tokens * (
            self.c.activation_bytes_per_batched_token // 2
        )

    def _fresh_memory(self, cfg: EngineConfig) -> RankMemoryState:
        return RankMemoryState(
            total=self.c.device_total_bytes,
            non_torch=self.c.non_torch_bytes,
            weights=self.c.weights_bytes_per_rank,
            kv_pool=cfg.kv_cache_memory_bytes or self.c.kv_budget_bytes_per_rank,
            activation_reserved=self.activation_peak_bytes(cfg),
        )

    def start(self, cfg: EngineConfig, now_s: float) -> float:
        """Load weights, profile, size the KV pool, capture warm-up graphs; returns graph GiB."""
        self.mem = self._fresh_memory(cfg)
        sizes = cfg.capture_sizes
        pool = 0
        if sizes:
            pool = (
                self.c.warmup_graph_pool_base_bytes
                + len(sizes) * self.c.warmup_graph_pool_bytes_per_size
            )
            self.mem.graph_pools.append(GraphPool(now_s, max(sizes), pool, False))
        # Like vLLM's memory profiling: the KV pool gets what is left after weights, peak
        # activations and graphs (keeping a little headroom), never more than the budget.
        over = self.mem.used + STARTUP_HEADROOM_BYTES - self.mem.total
        if over > 0:
            self.mem.kv_pool = max(0, self.mem.kv_pool - over)
        return pool / GiB

    def capture_on_the_fly(self, now_s: float, num_tokens: int, pool_bytes: int) -> None:
        """A new private pool that never shrinks; OOM if it does not fit."""
        if pool_bytes > self.mem.free:
            raise CudaOOM(pool_bytes, self.mem.free, self.mem)
        self.mem.graph_pools.append(GraphPool(now_s, num_tokens, pool_bytes, True))

    def run_activation(self, tokens: int, cfg: EngineConfig) -> None:
        """Activations of one step. The reserve covers the configured budget; more must fit."""
        need = self.c.activation_base_bytes + tokens * (
            self.c.activation_bytes_per_batched_token // 2
        )
        self.mem.activation_allocated = need
        if need > self.mem.activation_reserved:
            grow = need - self.mem.activation_reserved
            if grow > self.mem.free:
                raise CudaOOM(grow, self.mem.free, self.mem)
            self.mem.activation_reserved = need

    def leak(self, now_s: float, nbytes: int) -> None:
        if nbytes <= 0:
            return
        if nbytes > self.mem.free:
            raise CudaOOM(nbytes, self.mem.free, self.mem)
        self.mem.leaked += nbytes
        series = self.mem.leaked_series
        if not series or now_s - series[-1][0] >= 1.0:
            series.append((now_s, self.mem.leaked))
            if len(series) > 4096:
                del series[: len(series) - 4096]

    # --------------------------------------------------------------- telemetry
    def clock_mhz(self, rank: Rank) -> int:
        return rank.throttled_clock_mhz or self.c.sm_clock_max_mhz

    def slowdowns(self) -> tuple[float, ...]:
        """Per-rank slowdown factors; one shared tuple while clocks do not change (the step
        ring buffer stores a reference per step)."""
        mx = self.c.sm_clock_max_mhz
        key = tuple(r.throttled_clock_mhz for r in self.ranks)
        if key != self._slow_key:
            self._slow_key = key
            self._slow = tuple(mx / self.clock_mhz(r) for r in self.ranks)
        return self._slow

    def close_window(self, busy_s: float, tensor_s: float, dram_s: float, wall_s: float) -> None:
        """Fold one fixed telemetry window (aligned to the simulated-second grid) into every rank.

        Windows are grid-aligned so that telemetry does not depend on how often the simulation
        is advanced (determinism across HTTP timing).
        """
        util = min(1.0, busy_s / wall_s)
        slow = self.slowdowns()
        worst = max(slow)
        a = 0.5
        for r, s in zip(self.ranks, slow, strict=True):
            # The slowest rank computes the whole step; the others wait in the all-reduce.
            tensor = min(1.0, tensor_s / wall_s * (s / worst))
            dram = min(1.0, dram_s / wall_s * (s / worst))
            r.util = a * util + (1 - a) * r.util
            r.tensor_active = a * tensor + (1 - a) * r.tensor_active
            r.dram_active = a * dram + (1 - a) * r.dram_active
            clock_frac = self.clock_mhz(r) / self.c.sm_clock_max_mhz
            r.power_w = self.c.power_idle_w + (self.c.power_max_w - self.c.power_idle_w) * (
                0.45 * util + 0.55 * tensor
            ) * (clock_frac**2)
            # A throttled rank sits at its slowdown temperature (bad fan, blocked airflow).
            target_t = 88.0 if r.throttled_clock_mhz else 30.0 + 0.1 * r.power_w
            r.temp_c += (target_t - r.temp_c) * min(1.0, wall_s / 20.0)
            r.energy_mj += r.power_w * wall_s * 1000.0

    def fb_used_mib(self) -> int:
        return self.mem.used // MiB

    def fb_free_mib(self) -> int:
        return self.mem.free // MiB
