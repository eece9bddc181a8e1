"""Run the engine's session behind the load generator and the observers on a small machine.

vLLM's CPU engine is three processes: the API server (HTTP, streaming, ``/metrics``), the
engine core (scheduler) and the worker (the model). The engine core and the worker wait
for each other by spinning on shared memory (``shm_broadcast``: ``sched_yield`` for a
second after every read), which on a GPU host costs a spare core each. On a 2-core
machine they took the whole machine, and what shares it with the engine in a test (the
load generator, the poller, ``diagnose``) went without CPU for seconds at a time:

- at 4 requests/s of 150 + 300 tokens, scraping ``/metrics`` every 0.25 s, scrapes were
  answered only when the engine went idle, so the running/waiting/KV gauges read 0 in
  nearly every scrape while ``generation_tokens_total`` climbed ~300 between two of them;
  the load generator sent in bursts of ~19 and its p50 TTFT was 1.4 s;
- at 20 requests/s against 8 seats the scraper went up to 9 s without an answer and read
  0 running / 0 waiting at the peak of the storm.

The engine runs in a session of its own (``start_new_session``), and with the kernel's
autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``, on here) sessions
share the CPU as groups, whatever their threads' niceness. So the engine's group is set to
niceness 10 (``/proc/PID/autogroup``): the engine still takes every cycle nobody else
wants, and the load and the observers run when they need to. Measured with it: scrapes
every 0.25 s (and 0.5 s at the storm) as asked; gauges following Little's law (2-4
running at 4 requests/s); p95 TTFT at the client 17 ms; at the storm the queue growing by
~9 requests/s as arrivals (20/s) outran the seats (11.8/s served, 12.2/s before: the
engine lost no throughput).

Lowering the threads instead (the engine core's, or the worker's) was tried and dropped:
niceness only ranks threads within their group, so it did not keep the observers fed at a
storm. None of this moved the prefill incident's fixed p99 ITL (21.5-24.9 ms with the group
lowered, 24.3 ms with it at 0, 24.8 ms without the stream interval): that was a ceiling
inside one ITL bucket (realengine/sizing.py, prefill_load).

Whoever shares the machine with a measured engine must not lower its own session below the
engine's: a session set to niceness 19 mid-run (for a background job) starved its own load
generator and poller behind the engine at 10, and healthy traffic read a p95 TTFT of 3.8 s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

ENGINE_NICENESS = 10
PROC = Path("/proc")


def descendants(root: int, children: Mapping[int, Iterable[int]]) -> list[int]:
    """Every process below ``root`` (not ``root`` itself), parents before children."""
    found: list[int] = []
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def _parent(stat: str) -> int:
    """The parent pid from a ``/proc/PID/stat`` line (the command may hold spaces and ')')."""
    return int(stat.rsplit(")", 1)[1].split()[1])


def process_children(proc: Path = PROC) -> dict[int, list[int]]:
    """Parent pid -> child pids, as ``/proc`` lists them now (processes that vanish while
    it is read are skipped)."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = _parent((entry / "stat").read_text())
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def process_tree(root: int, proc: Path = PROC) -> list[int]:
    """``root`` and every process below it (the API server, its engine core, the worker)."""
    return [root, *descendants(root, process_children(proc))]


def lower_session_group(pid: int, niceness: int = ENGINE_NICENESS, proc: Path = PROC) -> bool:
    """Set the autogroup (the scheduling group of ``pid``'s session) to ``niceness``. False
    where the kernel has no autogroup scheduling or refuses: the engine then runs as
    started, and a test that needs the CPU share says so through ``MachineShare``."""
    try:
        (proc / str(pid) / "autogroup").write_text(f"{niceness}\n")
    except OSError:
        return False
    return True
