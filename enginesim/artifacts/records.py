"""Plain, frozen inputs for the artifact generators.

The simulator core fills these; the generators only read them. Keeping them free of
behaviour means a scenario can be replayed into any artifact (trace, snapshot, log)
without the generators knowing how the simulator decided anything.

All times are simulated seconds since the simulation epoch. Generators that need wall-clock
timestamps take an ``epoch_unix`` keyword; ``DEFAULT_EPOCH_UNIX`` is a fixed instant so the
output is reproducible byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

# 2026-02-12 19:50:09 UTC: a fixed, realistic instant (never the wall clock) so that two
# runs with the same inputs produce identical bytes.
DEFAULT_EPOCH_UNIX: float = 1770925809.0


@dataclass(frozen=True)
class StepRecord:
    """One engine step (one ``execute_model`` call) as seen by every TP rank.

    ``prefill_chunks`` holds, per scheduled prefill, ``(new tokens computed this step,
    tokens already computed or prefix-cached before it)``. ``rank_slowdown`` is one factor
    >= 1.0 per TP rank (empty means all 1.0). ``new_requests`` optionally overrides how many
    requests were *first* scheduled this step (vLLM's ``scheduled_new_reqs``); when None a
    prefill chunk with nothing computed before it counts as new.
    """

    index: int
    start_s: float
    duration_s: float
    prefill_chunks: tuple[tuple[int, int], ...]
    num_decode: int
    context_tokens: int
    rank_slowdown: tuple[float, ...]
    gc_pause_s: float
    cuda_graph: bool
    new_requests: int | None = None

    def __post_init__(self) -> None:
        if self.duration_s < 0:
            raise ValueError(f"step {self.index}: negative duration {self.duration_s}")
        if self.gc_pause_s < 0:
            raise ValueError(f"step {self.index}: negative gc pause {self.gc_pause_s}")
        for new, before in self.prefill_chunks:
            if new < 0 or before < 0:
                raise ValueError(f"step {self.index}: bad prefill chunk {(new, before)}")
        if any(f < 1.0 for f in self.rank_slowdown):
            raise ValueError(f"step {self.index}: rank_slowdown must be >= 1.0")

    @property
    def prefill_tokens(self) -> int:
        return sum(new for new, _ in self.prefill_chunks)

    @property
    def num_new_requests(self) -> int:
        """vLLM's ``len(scheduled_new_reqs)`` for this step."""
        if self.new_requests is not None:
            return self.new_requests
        return sum(1 for _, before in self.prefill_chunks if before == 0)

    @property
    def num_cached_requests(self) -> int:
        """vLLM's ``len(scheduled_cached_reqs.req_ids)``: continuing prefills plus decodes."""
        return len(self.prefill_chunks) - self.num_new_requests + self.num_decode


@dataclass(frozen=True)
class GraphCapture:
    """One CUDA-graph capture; ``after_warmup`` marks an on-the-fly capture at serve time."""

    time_s: float
    num_tokens: int
    pool_bytes: int
    after_warmup: bool


@dataclass(frozen=True)
class RankMemory:
    """What one TP rank's caching allocator should end up holding.

    ``leaked_bytes`` is a cumulative series ``(time_s, leaked bytes so far)``; each increase
    becomes allocations that are never freed. ``oom_at_s`` ends the history with a failed
    allocation; ``now_s`` is when the snapshot is dumped if there was no OOM.
    """

    device: int
    total_bytes: int
    weights_bytes: int
    kv_pool_bytes: int
    activation_peak_bytes: int
    graph_captures: tuple[GraphCapture, ...]
    leaked_bytes: tuple[tuple[float, int], ...]
    oom_at_s: float | None
    now_s: float


@dataclass(frozen=True)
class GcPause:
    """One cyclic-GC collection in the engine process."""

    time_s: float
    generation: int
    duration_s: float
    collected: int
    uncollectable: int
