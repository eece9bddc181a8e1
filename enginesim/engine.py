"""One replica: a vLLM-V1-like engine process on a TP group, advanced in discrete engine steps.

The simulation only moves forward through `advance_to(t)`; a step that starts at or before `t`
runs to completion. Nothing depends on when `advance_to` is called, so the same seed and the
same simulated time give the same state.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import deque
from typing import Any

from enginesim import flavours
from enginesim.artifacts import loglines as L
from enginesim.config import FIX_FIELDS, ConfigError, DeploymentConstants, EngineConfig, GiB
from enginesim.gpu import TELEMETRY_WINDOW_S, CudaOOM, GpuGroup
from enginesim.histogram import Histogram
from enginesim.logstream import LogBuffer
from enginesim.metrics import EngineMetrics
from enginesim.scheduler import Req, Scheduler
from enginesim.steptime import step_cost
from enginesim.workload import ArrivalProcess, WorkloadSpec

STEP_RING = 2048  # steps kept for /profiler/trace (enough for the largest K it accepts)
GC_RING = 2000


class RouterModel:
    """Per-replica share of the router: forward latency before a request reaches the engine."""

    def __init__(self, rng: random.Random, base_s: float = 0.0015, extra_s: float = 0.0) -> None:
        self.rng = rng
        self.base_s = base_s
        self.extra_s = extra_s
        from enginesim.exposition.buckets import ROUTER_FORWARD

        self.hist = Histogram(ROUTER_FORWARD)
        self.errors = 0

    def forward(self) -> float:
        d = self.base_s * math.exp(self.rng.gauss(0.0, 0.35))
        if self.extra_s:
            d += self.extra_s * math.exp(self.rng.gauss(0.0, 0.5))
        self.hist.observe(d)
        return d


class Engine:
    def __init__(
        self,
        replica: int,
        *,
        constants: DeploymentConstants,
        config: EngineConfig,
        workload: WorkloadSpec,
        seed: int,
        fmt: str = "vllm-v1",
        epoch_unix: float = 1_767_600_000.0,
        hostname: str | None = None,
        log_file: str | None = None,
        router_extra_s: float = 0.0,
        straggler: dict[int, int] | None = None,
        step_ring: int = STEP_RING,
    ) -> None:
        self.replica = replica
        self.c = constants
        self.cfg = config
        self.fmt = fmt
        self.flavour = flavours.get(fmt)
        self.epoch_unix = epoch_unix
        self.hostname = hostname or f"atlas-node-{replica:03d}"
        self.seed = seed
        base = seed * 1_000_003 + replica
        self.rng = random.Random(base)
        self.arrivals = ArrivalProcess(workload, random.Random(base + 1), config.max_model_len)
        self.router = RouterModel(random.Random(base + 2), extra_s=router_extra_s)
        self.gc_rng = random.Random(base + 3)
        self.gpu = GpuGroup(constants, replica, self.hostname, seed)
        for rank, mhz in (straggler or {}).items():
            if 0 <= rank < len(self.gpu.ranks):
                self.gpu.ranks[rank].throttled_clock_mhz = mhz
        self.log = LogBuffer(file_path=log_file)
        self.t = 0.0
        self.step_idx = 0
        self.next_rid = 0
        self.down_until: float | None = None
        self._restart_reason = ""
        self.restarts = 0
        self.ooms = 0
        self.steps: deque[tuple[Any, ...]] = deque(maxlen=step_ring)
        self.gc_pauses: deque[tuple[float, int, float, int, int]] = deque(maxlen=GC_RING)
        # Recent log lines with their simulated time: the gc log is served interleaved with
        # them, as a real engine's stderr (DEBUG_STATS lines carry no timestamp) would be.
        self.recent_lines: deque[tuple[float, str]] = deque(maxlen=GC_RING * 4)
        self.graph_captures_after_warmup = 0
        self.recent_oom_at: float | None = None
        self.version = 0  # bumps whenever observable state changes (render cache key)
        self._win_idx = 0
        self.last_gen_throughput = 0.0
        self.last_retracted = 0
        self.last_step_graph = False
        self._win_busy = self._win_tensor = self._win_dram = 0.0
        self._start_process(0.0, reason=None)

    # ------------------------------------------------------------ lifecycle
    def _ts(self, t: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.epoch_unix + t, tz=dt.UTC)

    def _log(
        self, t: float, level: str, fileinfo: str, lineno: int, msg: str, proc: str = ""
    ) -> None:
        self._emit(t, [L.LogMessage(level, fileinfo, lineno, msg, process=proc or None)])

    def _emit(self, t: float, messages: list[L.LogMessage]) -> None:
        self.flavour.logs.emit(self, t, messages)

    def _start_process(self, t: float, reason: str | None) -> None:
        cfg = self.cfg
        self.metrics = EngineMetrics(
            self.fmt, cfg.max_model_len, self.epoch_unix + t, dict(cfg.histogram_buckets)
        )
        took = self.gpu.start(cfg, t)
        total_blocks = self.gpu.mem.kv_pool // self.c.kv_bytes_per_token // cfg.block_size
        self.sched = Scheduler(cfg, total_blocks)
        self.captured_keys: set[int] = set()
        self.gc_counts = [0, 0, 0]
        self.stats_next = t + cfg.stats_interval_s
        self._stats_prompt = self._stats_gen = self._stats_preempt = 0
        self._stats_queries = self._stats_hits = 0
        self.down_until = None
        tp = self.c.tp_size
        k = 37 * self.restarts
        self.pids = {
            "APIServer": 1 + k,
            "EngineCore_DP0": 241 + k,
            **{f"Worker_TP{i}": 306 + k + i for i in range(tp)},
        }
        self.flavour.logs.startup(self, t, cfg, took, total_blocks, reason)
        self.version += 1

    def _crash(self, t: float, oom: CudaOOM) -> None:
        """CUDA OOM: the engine core dies; in-flight requests fail; the process restarts."""
        self.ooms += 1
        self.recent_oom_at = t
        self.gpu.mem.oom_at_s = t
        m = oom.state
        self._emit(
            t,
            L.oom_messages(
                oom.tried,
                max(oom.free, 0),
                total_bytes=m.total,
                process_in_use_bytes=m.used,
                allocated_bytes=m.allocated,
                private_pool_bytes=m.graph_pool_bytes,
                reserved_unallocated_bytes=max(0, m.reserved - m.allocated - m.graph_pool_bytes),
            )
            + L.restart_messages(
                version="0.33.0", model=self.cfg.model_name, tp_size=self.c.tp_size
            )[:5],
        )
        self._abort_all()
        self.down_until = t + self.cfg.restart_downtime_s
        self._restart_reason = "restart after CUDA OOM"
        self.restarts += 1
        self.version += 1

    def _abort_all(self) -> None:
        self.sched = Scheduler(self.cfg, self.sched.total_blocks)

    def restart(self, reason: str, downtime_s: float | None = None) -> None:
        self._log(
            self.t,
            "INFO",
            "launcher.py",
            80,
            f"Shutting down FastAPI HTTP server ({reason}).",
            "APIServer",
        )
        self._abort_all()
        self.restarts += 1
        self._restart_reason = reason
        self.down_until = self.t + (
            self.cfg.restart_downtime_s if downtime_s is None else downtime_s
        )
        self.version += 1

    @property
    def is_up(self) -> bool:
        return self.down_until is None

    # -------------------------------------------------------------- control
    def apply_fix(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply a runtime fix. Scheduler knobs apply live; graph/cache/defect changes restart."""
        cfg_changes: dict[str, Any] = {}
        restart = bool(changes.get("restart", False))
        applied: dict[str, Any] = {}
        for key, value in changes.items():
            if key in ("restart", "downtime_s"):
                continue
            if key == "clear_straggler":
                if value:
                    for r in self.gpu.ranks:
                        r.throttled_clock_mhz = None
                    applied[key] = True
                continue
            if key == "router_extra_delay_s":
                self.router.extra_s = float(value)
                applied[key] = float(value)
                continue
            if key not in FIX_FIELDS:
                raise ConfigError(f"unknown fix key: {key}")
            typ, needs_restart = FIX_FIELDS[key]
            if typ is list:
                if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
                    raise ConfigError(f"{key} must be a list of integers")
                value = tuple(value)
            elif typ is bool:
                if not isinstance(value, bool):
                    raise ConfigError(f"{key} must be a boolean")
            elif typ is int:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"{key} must be an integer")
            else:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ConfigError(f"{key} must be a number")
                value = float(value)
            cfg_changes[key] = value
            applied[key] = list(value) if isinstance(value, tuple) else value
            restart = restart or needs_restart
        new_cfg = self.cfg.replace(**cfg_changes) if cfg_changes else self.cfg
        if new_cfg.max_num_batched_tokens < new_cfg.max_num_seqs:
            raise ConfigError("max_num_batched_tokens must be >= max_num_seqs")
        self.cfg = new_cfg
        if restart:
            self.restart("configuration change", changes.get("downtime_s", 5.0))
        else:
            self.sched.cfg = new_cfg
            self._log(self.t, "INFO", "core.py", 455, f"Reconfigured scheduler: {applied}")
        self.version += 1
        return {"applied": applied, "restarted": restart}

    # ------------------------------------------------------------ time loop
    def advance_to(self, target: float) -> None:
        while True:
            if self.down_until is not None:
                if self.down_until > target:
                    self._drop_arrivals(target)
                    self._close_windows(target)
                    self.t = max(self.t, target)
                    return
                self._drop_arrivals(self.down_until)
                self.t = self.down_until
                self._start_process(self.t, reason=self._restart_reason)
            sched = self.sched
            self._pull_arrivals(self.t)
            if not sched.running and not sched.num_waiting:
                nxt = self.arrivals.peek()
                if nxt is None or nxt.arrival_s > target:
                    self._close_windows(target)
                    self.t = max(self.t, target)
                    self._idle_stats(target)
                    return
                self.t = nxt.arrival_s
                continue
            if self.t > target:
                self._close_windows(target)
                return
            self._step()

    def _pull_arrivals(self, t: float) -> None:
        proc = self.arrivals
        sched = self.sched
        while True:
            a = proc.peek()
            if a is None or a.arrival_s > t:
                return
            proc.pop()
            self.router.forward()
            r = Req(
                self.next_rid,
                a.arrival_s,
                a.prompt_len,
                a.output_len,
                a.max_tokens,
                a.priority,
                a.prefix_len,
                a.finish_reason,
            )
            self.next_rid += 1
            sched.enqueue(r)

    def _drop_arrivals(self, t: float) -> None:
        proc = self.arrivals
        while True:
            a = proc.peek()
            if a is None or a.arrival_s > t:
                return
            proc.pop()
            self.router.forward()
            self.router.errors += 1

    def _close_windows(self, t: float) -> None:
        idx = int(t // TELEMETRY_WINDOW_S)
        if idx <= self._win_idx:
            return
        gpu = self.gpu
        gpu.close_window(self._win_busy, self._win_tensor, self._win_dram, TELEMETRY_WINDOW_S)
        self._win_busy = self._win_tensor = self._win_dram = 0.0
        for _ in range(min(idx - self._win_idx - 1, 60)):
            gpu.close_window(0.0, 0.0, 0.0, TELEMETRY_WINDOW_S)
        self._win_idx = idx
        if self.cfg.allocator_leak_bytes_per_s and self.down_until is None:
            try:
                self.gpu.leak(t, int(self.cfg.allocator_leak_bytes_per_s * TELEMETRY_WINDOW_S))
            except CudaOOM as oom:
                self._crash(t, oom)
        self.version += 1

    # ----------------------------------------------------------------- step
    def _gc_tick(self, t: float) -> float:
        cfg = self.cfg
        counts = self.gc_counts
        counts[0] += 1
        if counts[0] < cfg.gc_gen0_every_steps:
            return 0.0
        counts[0] = 0
        counts[1] += 1
        gen = 0
        if counts[1] >= cfg.gc_gen1_every_gen0:
            counts[1] = 0
            counts[2] += 1
            gen = 1
            if counts[2] >= cfg.gc_gen2_every_gen1:
                counts[2] = 0
                gen = 2
        rng = self.gc_rng
        if gen == 2:
            base = 0.001 if cfg.gc_frozen else cfg.gc_gen2_pause_s
            pause = base * (0.9 + 0.2 * rng.random())
        elif gen == 1:
            pause = 0.0006 * (0.8 + 0.4 * rng.random())
        else:
            pause = 0.00012 * (0.8 + 0.4 * rng.random())
        collected = int(pause * 2.0e6 * rng.random())
        self.gc_pauses.append((t, gen, pause, collected, 0))
        return pause

    def _graph_for(self, t: float, num_tokens: int) -> bool:
        cfg = self.cfg
        if cfg.enforce_eager:
            return False
        sizes = cfg.capture_sizes
        if sizes and num_tokens <= sizes[-1]:
            return True
        if not cfg.capture_on_the_fly or num_tokens > cfg.on_the_fly_max_tokens:
            return False
        pad = cfg.on_the_fly_pad_tokens
        key = -(-num_tokens // pad) * pad
        if key in self.captured_keys:
            return True
        pool = self.rng.randint(cfg.on_the_fly_pool_bytes_min, cfg.on_the_fly_pool_bytes_max)
        self.gpu.capture_on_the_fly(t, key, pool)  # may raise CudaOOM
        self.captured_keys.add(key)
        self.graph_captures_after_warmup += 1
        self._emit(
            t, L.graph_capture_messages(1, "PIECEWISE", 2.0, pool / GiB, process="Worker_TP0")
        )
        return True

    def _step(self) -> None:
        sched = self.sched
        cfg = self.cfg
        m = self.metrics
        t = self.t
        s = self.step_idx
        self._close_windows(t)
        if self.down_until is not None:  # an allocator leak just crashed the engine
            return
        plan = sched.schedule(s, t)
        self.last_retracted = plan.preempted
        if plan.preempted:
            m.num_preemptions += plan.preempted
            self._stats_preempt += plan.preempted
            self.flavour.logs.retracted(self, t, plan.preempted)
        prefill_tokens = 0
        prefill_ctx = 0
        recompute_tokens = 0  # KV this request already had before a preemption evicted it
        for r_, chunk, before in plan.prefills:
            prefill_tokens += chunk
            prefill_ctx += before + chunk
            if r_.high_water > before:
                recompute_tokens += min(chunk, r_.high_water - before)
        n_dec = plan.num_decode
        num_tokens = prefill_tokens + n_dec
        if num_tokens == 0:
            # Nothing schedulable (e.g. blocks exhausted by a leak): wait for the next arrival.
            nxt = self.arrivals.peek()
            self.t = t + 0.01 if nxt is None else max(t + 0.01, min(nxt.arrival_s, t + 1.0))
            self.step_idx += 1
            return
        try:
            graph = self._graph_for(t, num_tokens)
            self.gpu.run_activation(num_tokens, cfg)
        except CudaOOM as oom:
            self._crash(t, oom)
            return
        self.last_step_graph = graph
        slow = self.gpu.slowdowns()
        worst = max(slow)
        context = plan.decode_context + prefill_ctx
        cost = step_cost(
            self.c,
            prefill_tokens=prefill_tokens,
            num_decode=n_dec,
            context_tokens=context,
            num_seqs=n_dec + len(plan.prefills),
            cuda_graph=graph,
            rank_slowdown=worst,
        )
        pause = self._gc_tick(t)
        dur = cost.total_s + pause
        end = t + dur
        # Telemetry: kernel time is busy; prefill GEMMs keep tensor pipes busy, decode far less.
        occ = 0.3 + 0.3 * min(1.0, n_dec / 64.0)
        # GPU_UTIL counts kernel time that advances requests; re-prefilling KV that a
        # preemption threw away is wasted work and is not counted (README, "GPU utilisation").
        wasted = recompute_tokens * self.c.prefill_cost_per_token_s * worst
        self._win_busy += cost.gpu_s - wasted
        self._win_tensor += (
            cost.prefill_s * 0.9 + cost.decode_s * occ + cost.attention_s * 0.3
        ) * worst
        self._win_dram += (
            cost.decode_s * 0.7 + cost.attention_s * 0.9 + cost.prefill_s * 0.3
        ) * worst
        at_first_token = self.flavour.step_tokens_at_first_token
        if not at_first_token:
            m.iteration_tokens.observe(num_tokens)
        first_prompts = 0  # prompt tokens computed for the requests whose first token is out
        generated_before = m.generation_tokens
        kind = "prefill" if prefill_tokens else "decode"
        m.graph_passes[f"{kind}_{'cuda_graph' if graph else 'none'}"] += 1
        # Decode tokens: every decoding request saw this whole step as its inter-token gap.
        if n_dec:
            m.itl.observe(dur, n_dec)
            m.generation_tokens += n_dec
            self._stats_gen += n_dec
        # Prefill chunks.
        chunks = []
        for r, chunk, before in plan.prefills:
            chunks.append((chunk, before))
            r.num_computed += chunk
            if r.num_computed >= r.total_len:
                sched.prefill_done(r)
                r.generated += 1
                m.generation_tokens += 1
                self._stats_gen += 1
                if r.first_token_s < 0:
                    r.first_token_s = end
                    m.ttft.observe(end - r.arrival_s)
                    m.queue_time.observe(r.first_scheduled_s - r.arrival_s)
                    # Like vLLM V1's IterationStats: a request's whole prompt, once, when its
                    # first token comes out; re-prefill after a preemption is not counted.
                    m.prompt_tokens += r.prompt_len
                    self._stats_prompt += r.prompt_len
                    m.prompt_tokens_cached += r.cached_tokens
                    first_prompts += r.prompt_len - r.cached_tokens
                else:
                    m.itl.observe(end - r.last_token_s)
                r.last_token_s = end
                if r.generated >= r.output_len:
                    del sched.running[r.rid]
                    self._finish(r, end)
                else:
                    sched.join_decode(r, s + 1)
        for r in sched.pop_finished(s):
            r.last_token_s = end
            self._finish(r, end)
        if at_first_token:
            # A step whose outputs are none (prefill chunks only) records nothing.
            out_batch = first_prompts + m.generation_tokens - generated_before
            if out_batch:
                m.iteration_tokens.observe(out_batch)
        self.steps.append((s, t, dur, tuple(chunks), n_dec, context, slow, pause, graph))
        self.step_idx = s + 1
        self.t = end
        if end >= self.stats_next:
            self._emit_stats(end)
        self.version += 1

    def _finish(self, r: Req, end: float) -> None:
        m = self.metrics
        sched = self.sched
        r.state = 3
        leak = bool(self.cfg.kv_leak_fraction) and self.rng.random() < self.cfg.kv_leak_fraction
        sched.release(r, leak)
        reason = r.finish_reason
        m.success[reason] += 1
        m.num_requests += 1
        m.e2e.observe(end - r.arrival_s)
        m.inference_time.observe(end - r.first_scheduled_s)
        m.prefill_time.observe(r.first_token_s - r.first_scheduled_s)
        m.decode_time.observe(end - r.first_token_s)
        if r.generated > 1:
            m.request_tpot.observe((end - r.first_token_s) / (r.generated - 1))
        m.request_prompt_tokens.observe(r.prompt_len)
        m.request_generation_tokens.observe(r.generated)
        m.request_max_num_generation_tokens.observe(r.max_tokens)
        m.request_params_n.observe(1)
        m.request_params_max_tokens.observe(r.max_tokens)
        m.request_prefill_kv_computed_tokens.observe(r.prompt_len - r.cached_tokens)
        m.request_num_preemptions.observe(r.num_preemptions)

    def _idle_stats(self, target: float) -> None:
        if target >= self.stats_next:
            n = math.floor((target - self.stats_next) / self.cfg.stats_interval_s) + 1
            self.stats_next += n * self.cfg.stats_interval_s
            self._stats_prompt = self._stats_gen = self._stats_preempt = 0

    def _emit_stats(self, t: float) -> None:
        iv = self.cfg.stats_interval_s
        sched = self.sched
        self.last_gen_throughput = self._stats_gen / iv
        q = sched.prefix_queries - self._stats_queries
        h = sched.prefix_hits - self._stats_hits
        hit = (h / q if q else 0.0) if self.cfg.enable_prefix_caching else None
        self.flavour.logs.stats(self, t, hit)
        self._stats_queries = sched.prefix_queries
        self._stats_hits = sched.prefix_hits
        self._stats_prompt = self._stats_gen = self._stats_preempt = 0
        while self.stats_next <= t:
            self.stats_next += iv

    # ------------------------------------------------------------ snapshots
    def gauges(self) -> dict[str, float]:
        sched = self.sched
        return {
            "running": float(len(sched.running)),
            "waiting": float(sched.num_waiting),
            "kv_usage": sched.kv_usage,
            "used_tokens": float(sched.used_blocks * self.cfg.block_size),
            "total_tokens": float(sched.total_blocks * self.cfg.block_size),
        }
