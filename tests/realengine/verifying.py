"""Verifying a fix on the real engine with the product's own pieces: an in-process
``Diagnosis`` polls the engine while the load runs, and ``verification.verify`` judges the
fix template's criteria over what it saw."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

from deployments.budget import Budget
from investigations.diagnose import Diagnosis
from investigations.playbook import Fix, get_playbook
from investigations.verification import VerificationResult, verify
from probes.policy import fetch_policy
from realengine.priority import process_tree


class Poller:
    """Poll one engine every ``interval_s`` in a thread until stopped (bounded by max_s)."""

    def __init__(self, symptom: str, budget: Budget, metrics_url: str, *,
                 interval_s: float = 5.0, max_s: float = 600.0) -> None:  # fmt: skip
        self.playbook = get_playbook(symptom)
        self.diagnosis = Diagnosis(
            self.playbook, budget, [("engine", metrics_url)], fetch_policy(), window_s=60
        )
        self.interval_s = interval_s
        self.max_s = max_s
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self.started = 0.0

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_s
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            self.diagnosis.cycle()
            self.stop_event.wait(self.interval_s)

    def __enter__(self) -> Poller:
        self.started = time.time()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)

    def wait_until(self, at: float) -> None:
        """Sleep until the unix time ``at`` and one more cycle after it (bounded by max_s)."""
        time.sleep(max(0.0, min(at - time.time(), self.max_s)) + self.interval_s)

    def view(self) -> dict:
        return {
            key: [(labels, points) for labels, points in series.items()]
            for key, series in self.diagnosis.observations.items()
        }


def scaled_fix(symptom: str, cause: str, *, window_s: int, settle_s: int = 0) -> Fix:
    """The playbook's fix with a test-sized verification window. The engine restarts with
    fresh counters, so nothing from before the fix is in the new observations anyway."""
    fix = get_playbook(symptom).node(cause).fix
    assert fix is not None
    return dataclasses.replace(fix, verify_window_s=window_s, settle_s=settle_s)


def judge(fix: Fix, budget: Budget, poller: Poller, params: dict) -> VerificationResult:
    return verify(fix, budget, poller.view(), applied_at=poller.started, now=time.time(),
                  params=params)  # fmt: skip


def criteria(result: VerificationResult) -> str:
    return "; ".join(
        f"{c.title}: {c.measured} {c.op} {c.threshold} -> {c.holds}" for c in result.criteria
    )


def _jiffies(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


class MachineShare:
    """Where the machine's CPU went over a window: the engine (its process tree), this test
    process (load generator and poller) and everything else, in cores. A verification that
    fails its latency criterion on a shared machine says which it was."""

    def __init__(self, engine_pid: int) -> None:
        self.engine_pid = engine_pid
        self.start = self._read()

    def _read(self) -> tuple[float, int, int, int]:
        cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        idle = int(cpu[3]) + int(cpu[4])
        engine = sum(_jiffies(pid) for pid in process_tree(self.engine_pid))
        return time.monotonic(), sum(int(v) for v in cpu[:8]) - idle, engine, _jiffies(os.getpid())

    def report(self) -> dict:
        end = self._read()
        seconds = end[0] - self.start[0]
        tick = os.sysconf("SC_CLK_TCK") * seconds
        busy, engine, ours = ((end[i] - self.start[i]) / tick for i in (1, 2, 3))
        return {"seconds": round(seconds, 1), "busy_cores": round(busy, 2),
                "engine_cores": round(engine, 2), "test_process_cores": round(ours, 2),
                "other_cores": round(busy - engine - ours, 2), "cores": os.cpu_count(),
                "loadavg_1m": os.getloadavg()[0]}  # fmt: skip
