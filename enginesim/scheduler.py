"""vLLM-V1-like continuous-batching scheduler with block-based KV cache.

Per step: running requests first (each decode needs one slot; a full block pool preempts the most
recently admitted request by recompute), then partial prefills with what is left of the token
budget, then admissions from the waiting queue (priority queue first when priority scheduling is
on) while seats, budget and free blocks last. Preempted requests go back to the front of the
queue and re-prefill prompt + generated tokens.

Cost: decoding requests are not touched per step. A decoding request's context grows by one per
step, so its context is `ctx0 + (step - s0)`; block growth is counted with `block_size` phase
buckets and finishes come off a heap keyed by the step of the last token. Per-step work is
O(admissions + finishes + preemptions + partial prefills), not O(running).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from enginesim.config import EngineConfig

WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3


class Req:
    __slots__ = (
        "arrival_s",
        "blocks",
        "cached_tokens",
        "ctx0",
        "epoch",
        "finish_reason",
        "first_scheduled_s",
        "first_token_s",
        "generated",
        "high_water",
        "last_token_s",
        "max_tokens",
        "num_computed",
        "num_preemptions",
        "output_len",
        "prefix_len",
        "priority",
        "prompt_len",
        "rid",
        "s0",
        "shared_blocks",
        "state",
    )

    def __init__(
        self,
        rid: int,
        arrival_s: float,
        prompt_len: int,
        output_len: int,
        max_tokens: int,
        priority: bool,
        prefix_len: int,
        finish_reason: str,
    ) -> None:
        self.rid = rid
        self.arrival_s = arrival_s
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.max_tokens = max_tokens
        self.priority = priority
        self.prefix_len = prefix_len
        self.finish_reason = finish_reason
        self.generated = 0
        self.num_computed = 0
        self.high_water = 0  # most tokens whose KV this request ever had (recompute detection)
        self.blocks = 0
        self.shared_blocks = 0
        self.cached_tokens = 0
        self.state = WAITING
        self.first_scheduled_s = -1.0
        self.first_token_s = -1.0
        self.last_token_s = -1.0
        self.num_preemptions = 0
        self.ctx0 = 0
        self.s0 = 0
        self.epoch = 0

    @property
    def total_len(self) -> int:
        """Tokens whose KV must exist before the next token can be sampled."""
        return self.prompt_len + self.generated


@dataclass
class Plan:
    """What one step carries."""

    prefills: list[tuple[Req, int, int]] = field(default_factory=list)  # (req, chunk, before)
    num_decode: int = 0
    decode_context: int = 0
    preempted: int = 0
    admitted: int = 0


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Scheduler:
    def __init__(self, cfg: EngineConfig, total_blocks: int) -> None:
        self.cfg = cfg
        self.bs = cfg.block_size
        self.total_blocks = total_blocks
        self.free_blocks = total_blocks
        self.leaked_blocks = 0
        # Steps in which a waiting request found a free seat but not the blocks for its
        # chunk: the KV cache, not the seats, held it back (ground truth for benches).
        self.kv_stalls = 0
        self.waiting: deque[Req] = deque()
        self.prio_waiting: deque[Req] = deque()
        self.running: dict[int, Req] = {}
        self.prefilling: list[Req] = []
        self.n_dec = 0
        self.phase = [0] * self.bs
        self.ctx_offset_sum = 0  # sum over decoding requests of (ctx0 - s0)
        self.finish_heap: list[tuple[int, int, int, Req]] = []
        self.prefix_cached = False
        self.prefix_blocks = 0  # shared prefix blocks held by the prefix cache
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.retracted_input_tokens = 0
        self.retracted_output_tokens = 0

    # ----------------------------------------------------------- accounting
    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks

    @property
    def kv_usage(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.prio_waiting)

    def decode_context_at(self, step: int) -> int:
        return self.ctx_offset_sum + self.n_dec * step

    def _blocks_for(self, r: Req, tokens: int) -> int:
        return max(0, _ceil_div(tokens, self.bs) - r.shared_blocks)

    def enqueue(self, r: Req) -> None:
        (
            self.prio_waiting if (r.priority and self.cfg.priority_scheduling) else self.waiting
        ).append(r)

    # ------------------------------------------------------------- decoding
    def join_decode(self, r: Req, step_next: int) -> None:
        r.state = DECODE
        r.ctx0 = r.num_computed
        r.s0 = step_next
        remaining = r.output_len - r.generated
        finish_step = step_next + remaining - 1
        self.n_dec += 1
        key = (r.ctx0 - r.s0) % self.bs
        self.phase[key] += 1
        self.ctx_offset_sum += r.ctx0 - r.s0
        heapq.heappush(self.finish_heap, (finish_step, r.rid, r.epoch, r))

    def _leave_decode(self, r: Req) -> None:
        self.n_dec -= 1
        self.phase[(r.ctx0 - r.s0) % self.bs] -= 1
        self.ctx_offset_sum -= r.ctx0 - r.s0
        r.epoch += 1

    def pop_finished(self, step: int) -> list[Req]:
        """Decoding requests whose last token was produced by `step`."""
        out = []
        heap = self.finish_heap
        while heap and heap[0][0] <= step:
            _, _, epoch, r = heapq.heappop(heap)
            if r.epoch != epoch or r.state != DECODE:
                continue
            r.num_computed = r.ctx0 + (step - r.s0 + 1)
            r.blocks = self._blocks_for(r, r.num_computed)
            r.generated += step - r.s0 + 1
            self._leave_decode(r)
            del self.running[r.rid]
            r.state = DONE
            out.append(r)
        return out

    def release(self, r: Req, leak: bool) -> None:
        if leak:
            self.leaked_blocks += r.blocks
        else:
            self.free_blocks += r.blocks
        r.blocks = 0

    # ----------------------------------------------------------- preemption
    def _preempt_last(self, step: int, now_s: float) -> Req | None:
        if not self.running:
            return None
        rid = next(reversed(self.running))
        r = self.running.pop(rid)
        if r.state == DECODE:
            r.high_water = max(r.high_water, r.ctx0 + (step - r.s0))
            r.blocks = self._blocks_for(r, r.ctx0 + (step - r.s0))
            done = step - r.s0  # decode steps completed before this one
            r.generated += done
            if done > 0:
                r.last_token_s = now_s
            self._leave_decode(r)
        else:
            r.high_water = max(r.high_water, r.num_computed)
            self.prefilling.remove(r)
        self.free_blocks += r.blocks
        self.retracted_input_tokens += r.prompt_len
        self.retracted_output_tokens += r.generated
        r.blocks = 0
        r.num_computed = r.cached_tokens
        r.state = WAITING
        r.num_preemptions += 1
        (
            self.prio_waiting if (r.priority and self.cfg.priority_scheduling) else self.waiting
        ).appendleft(r)
        return r

    # ------------------------------------------------------------- schedule
    def schedule(self, step: int, now_s: float) -> Plan:
        cfg = self.cfg
        bs = self.bs
        plan = Plan()
        # 1. Decode slots: requests whose context sits on a block boundary need a new block.
        while True:
            need = self.phase[(-step) % bs]
            if need <= self.free_blocks or not self.running:
                break
            self._preempt_last(step, now_s)
            plan.preempted += 1
        self.free_blocks -= min(need, self.free_blocks)
        budget = cfg.max_num_batched_tokens - self.n_dec
        # 2. Partial prefills already running.
        for r in list(self.prefilling):
            if budget <= 0:
                break
            if r.state != PREFILL or r.rid not in self.running:
                continue
            remaining = r.total_len - r.num_computed
            chunk = min(remaining, budget)
            extra = self._blocks_for(r, r.num_computed + chunk) - r.blocks
            while extra > self.free_blocks:
                victim = self._preempt_last(step, now_s)
                plan.preempted += 1
                if victim is None or victim is r:
                    break
            if r.state != PREFILL or extra > self.free_blocks:
                continue
            self.free_blocks -= extra
            r.blocks += extra
            plan.prefills.append((r, chunk, r.num_computed))
            budget -= chunk
        # 3. Admissions (V1 skips them in a step that had to preempt).
        if not plan.preempted:
            for queue in (self.prio_waiting, self.waiting):
                while queue and budget > 0 and len(self.running) < cfg.max_num_seqs:
                    r = queue[0]
                    if r.first_scheduled_s < 0 and cfg.enable_prefix_caching and r.prefix_len:
                        self._apply_prefix_cache(r)
                    remaining = r.total_len - r.num_computed
                    if not cfg.enable_chunked_prefill and remaining > budget:
                        break
                    chunk = min(remaining, budget)
                    extra = self._blocks_for(r, r.num_computed + chunk) - r.blocks
                    if extra > self.free_blocks:
                        self.kv_stalls += 1
                        break
                    queue.popleft()
                    self.free_blocks -= extra
                    r.blocks += extra
                    r.state = PREFILL
                    if r.first_scheduled_s < 0:
                        r.first_scheduled_s = now_s
                        self.prefix_queries += r.prompt_len
                        self.prefix_hits += r.cached_tokens
                    self.running[r.rid] = r
                    self.prefilling.append(r)
                    plan.prefills.append((r, chunk, r.num_computed))
                    plan.admitted += 1
                    budget -= chunk
                if budget <= 0 or len(self.running) >= cfg.max_num_seqs:
                    break
        plan.num_decode = self.n_dec
        plan.decode_context = self.decode_context_at(step)
        return plan

    def _apply_prefix_cache(self, r: Req) -> None:
        pb = r.prefix_len // self.bs
        if pb <= 0:
            return
        if self.prefix_cached:
            r.shared_blocks = pb
            r.cached_tokens = pb * self.bs
            r.num_computed = r.cached_tokens

    def prefill_done(self, r: Req) -> None:
        """Called when a request's prefill completes: the first one publishes the shared prefix."""
        self.prefilling.remove(r)
        if self.cfg.enable_prefix_caching and r.prefix_len and not self.prefix_cached:
            pb = r.prefix_len // self.bs
            if pb > 0 and r.blocks >= pb:
                self.prefix_cached = True
                self.prefix_blocks = pb
                r.blocks -= pb  # ownership moves to the cache
                r.shared_blocks = pb
