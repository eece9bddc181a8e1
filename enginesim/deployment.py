"""N replicas + router + simulated clock.

Replica engines are independent (each receives its own share of the traffic, as a round-robin
router gives), so one replica can be advanced without the others: requests for replica i only
advance replica i to the current simulated time. `simulated` caps how many engines are actually
simulated; replicas beyond it mirror engine `i % simulated` under their own labels, hostname and
GPU UUIDs (for fan-out benchmarks with many hundreds of endpoints).
"""

from __future__ import annotations

import time
from typing import Any

from enginesim import flavours, scenarios
from enginesim.config import DeploymentConstants, EngineConfig
from enginesim.engine import Engine
from enginesim.gpu import GpuGroup

DEFAULT_EPOCH_UNIX = 1_767_600_000.0  # Monday 2026-01-05 08:00:00 UTC: the morning ramp


class SimClock:
    """Simulated seconds: wall elapsed x speed (realtime) or advanced explicitly (manual)."""

    def __init__(self, mode: str = "realtime", speed: float = 1.0) -> None:
        if mode not in ("realtime", "manual"):
            raise ValueError("clock mode must be realtime or manual")
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.mode = mode
        self.speed = speed
        self._t0 = time.monotonic()
        self._manual = 0.0

    def now(self) -> float:
        if self.mode == "manual":
            return self._manual
        return (time.monotonic() - self._t0) * self.speed

    def advance(self, seconds: float) -> float:
        if self.mode != "manual":
            raise RuntimeError("advance needs --clock manual")
        if seconds < 0:
            raise ValueError("cannot go back in time")
        self._manual += seconds
        return self._manual


class Replica:
    """One served endpoint: a simulated engine or a mirror of one."""

    def __init__(
        self, index: int, engine: Engine, gpus: GpuGroup | _MirrorGpus | None = None
    ) -> None:
        self.index = index
        self.engine = engine
        self.mirror = engine.replica != index
        self.engine_label = str(index)
        self.hostname = f"atlas-node-{index:03d}"
        self.gpus = gpus or engine.gpu


class Deployment:
    def __init__(
        self,
        scenario: str | scenarios.Scenario = "healthy",
        *,
        replicas: int = 1,
        simulated: int | None = None,
        seed: int = 0,
        fmt: str = "vllm-v1",
        clock: SimClock | None = None,
        constants: DeploymentConstants | None = None,
        params: dict[str, float] | None = None,
        log_file: str | None = None,
        epoch_unix: float = DEFAULT_EPOCH_UNIX,
        loop_s: float | None = None,
    ) -> None:
        self.flavour = flavours.get(fmt)  # ValueError naming the known formats
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        # A Scenario object is a scenario built elsewhere (enginesim.draws scales one to
        # drawn model constants); a name is looked up with its parameters.
        self.scenario = (
            scenario
            if isinstance(scenario, scenarios.Scenario)
            else scenarios.get(scenario, params)
        )
        self.loop_s = loop_s
        if loop_s is not None:
            self.scenario = scenarios.looped(self.scenario, loop_s)
        self.constants = constants or DeploymentConstants()
        self.fmt = fmt
        self.seed = seed
        self.epoch_unix = epoch_unix
        self.log_file = log_file
        self.clock = clock or SimClock()
        self.fixes: list[dict[str, Any]] = []
        n_sim = min(replicas, simulated or replicas)
        # Large fleets keep shorter step histories (memory); /profiler/trace caps K to it.
        step_ring = 2048 if n_sim <= 64 else 512
        sc = self.scenario
        cfg: EngineConfig = sc.engine_config()
        self.engines = []
        for i in range(n_sim):
            self.engines.append(
                Engine(
                    i,
                    constants=self.constants,
                    config=cfg,
                    workload=sc.workload_spec(),
                    seed=seed,
                    fmt=fmt,
                    epoch_unix=epoch_unix,
                    log_file=(log_file.replace("{replica}", str(i)) if log_file else None)
                    if (i == 0 or (log_file and "{replica}" in log_file))
                    else None,
                    router_extra_s=sc.router_extra_s,
                    straggler=sc.straggler if i in sc.straggler_replicas else None,
                    step_ring=step_ring,
                )
            )
        self.replicas = []
        for i in range(replicas):
            eng = self.engines[i % n_sim]
            gpus = None
            if i >= n_sim:
                gpus = _MirrorGpus(eng.gpu, self.constants, i, seed)
            self.replicas.append(Replica(i, eng, gpus))

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        return self.clock.now()

    def sync(self, replica: int | None = None) -> float:
        """Advance one replica (or all) to the clock's current simulated time."""
        t = self.clock.now()
        if replica is None:
            for e in self.engines:
                e.advance_to(t)
        else:
            self.replicas[replica].engine.advance_to(t)
        return t

    def advance(self, seconds: float) -> float:
        t = self.clock.advance(seconds)
        for e in self.engines:
            e.advance_to(t)
        return t

    # --------------------------------------------------------------- control
    def apply_fix(self, changes: dict[str, Any], replica: int | None = None) -> dict[str, Any]:
        self.sync()
        targets = self.engines if replica is None else [self.replicas[replica].engine]
        results = [e.apply_fix(changes) for e in targets]
        self.fixes.append({"at_s": self.now(), "changes": changes, "replica": replica})
        return {"sim_time_s": self.now(), "results": results}

    def switch_scenario(self, scenario: str, seed: int | None = None) -> dict[str, Any]:
        """Rebuild in place as a fresh deployment of ``scenario`` (a redeploy, for drills):
        same replicas, format, constants and clock mode; the clock restarts at 0 and the
        epoch moves on by the time served, so wall timestamps keep increasing."""
        fresh = Deployment(
            scenario,
            replicas=len(self.replicas),
            simulated=len(self.engines),
            seed=self.seed if seed is None else seed,
            fmt=self.fmt,
            clock=SimClock(self.clock.mode, self.clock.speed),
            constants=self.constants,
            log_file=self.log_file,
            epoch_unix=self.epoch_unix + self.now(),
            loop_s=self.loop_s,
        )
        self.__dict__.update(fresh.__dict__)
        return self.truth()

    def clock_report(self) -> dict[str, Any]:
        """Where the traffic's cycle stands (the demo's "incident in progress" clock): which
        loop, how far into it, whether the scenario's incident is showing and how long until
        it next does. Ground truth about the timing, so it is served only behind the
        control token, like /control/truth."""
        now = self.now()
        loop = self.loop_s
        phase = now % loop if loop else now
        sc = self.scenario
        endless = float("inf")
        window = sc.incident_s or ((sc.signature_by_s, endless) if sc.causes else None)
        # A steady incident (no window of its own) does not restart with the traffic.
        phase_in = now if sc.incident_s is None else phase
        live = window is not None and window[0] <= phase_in < window[1]
        if window is None:
            starts_in = None
        elif live:
            starts_in = 0.0
        elif phase_in < window[0]:
            starts_in = window[0] - phase_in
        elif sc.incident_s is None:
            starts_in = None
        else:
            starts_in = loop - phase + window[0] if loop else None
        return {
            "sim_time_s": now,
            "loop_s": loop,
            "loop": int(now // loop) + 1 if loop else 1,
            "phase_s": phase,
            "incident_s": list(window) if window and window[1] != endless else None,
            "incident_in_progress": live,
            "incident_starts_in_s": starts_in,
            "incident_ends_in_s": (
                window[1] - phase_in
                if window is not None and live and window[1] != endless
                else None
            ),
            "fixes": len(self.fixes),
            # Simulated seconds per wall second (None: a manual clock, moved by /advance).
            "speed": self.clock.speed if self.clock.mode == "realtime" else None,
        }

    def truth(self) -> dict[str, Any]:
        sc = self.scenario
        fixed = bool(self.fixes) and all(
            k in {kk for f in self.fixes for kk in f["changes"]} for k in sc.fix
        )
        affected = list(sc.straggler_replicas) if sc.straggler else list(range(len(self.replicas)))
        return {
            **sc.truth(),
            "fix_applied": fixed,
            "fixes": self.fixes,
            "sim_time_s": self.now(),
            "affected_replicas": affected if sc.causes else [],
            "replicas": len(self.replicas),
            "simulated_engines": len(self.engines),
            "format": self.fmt,
            "seed": self.seed,
            "engines": [
                {
                    "replica": e.replica,
                    "up": e.is_up,
                    "restarts": e.restarts,
                    "ooms": e.ooms,
                    "graph_captures_after_warmup": e.graph_captures_after_warmup,
                    "config": {
                        k: (list(v) if isinstance(v, tuple) else v)
                        for k, v in e.cfg.__dict__.items()
                        if k != "extra"
                    },
                    "leaked_kv_blocks": e.sched.leaked_blocks,
                    "straggler_ranks": [
                        r.index for r in e.gpu.ranks if r.throttled_clock_mhz is not None
                    ],
                }
                for e in self.engines
            ],
        }


class _MirrorGpus:
    """A mirrored replica's GPUs: the source engine's telemetry under distinct identities."""

    def __init__(self, src: GpuGroup, constants: DeploymentConstants, index: int, seed: int):
        own = GpuGroup(constants, index, f"atlas-node-{index:03d}", seed)
        self._src = src
        self.ranks = [
            _MirrorRank(r, o.uuid, o.pci_bus_id) for r, o in zip(src.ranks, own.ranks, strict=True)
        ]
        self.hostname = own.hostname
        self.c = constants

    def __getattr__(self, name: str) -> Any:
        return getattr(self._src, name)


class _MirrorRank:
    def __init__(self, src: Any, uuid: str, pci_bus_id: str) -> None:
        self._src = src
        self.uuid = uuid
        self.pci_bus_id = pci_bus_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._src, name)
