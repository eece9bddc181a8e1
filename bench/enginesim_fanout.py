"""How many simulated replicas can one enginesim process serve at a 5 s scrape interval?

For each fleet size N the bench starts a server subprocess and, every 5 s, scrapes all N
`/replicas/{i}/metrics` endpoints (32 keep-alive connections, like a fan-out poller). It reports
the sweep time and CPU per sweep against a named baseline measured in the same run:

    baseline "static": the same asyncio HTTP server answering every replica with one
    pre-rendered body of the same size (no simulation, no rendering).

A size "fits" when the simulated sweep finishes inside the 5 s interval. Only ratios against the
baseline are meaningful across machines; nothing here asserts absolute times.

    .venv/bin/python bench/enginesim_fanout.py               # sizes 200,400,800,1600
    .venv/bin/python bench/enginesim_fanout.py --sizes 50,100 --cycles 2
    .venv/bin/python bench/enginesim_fanout.py --simulated 64  # mirror beyond 64 engines
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

INTERVAL_S = 5.0


# ----------------------------------------------------------------------------- server side
def serve(mode: str, replicas: int, scenario: str, simulated: int | None) -> None:
    from enginesim.deployment import Deployment, SimClock
    from enginesim.exposition import vllm
    from enginesim.server import TEXT_FORMAT, Response, SimServer

    dep = Deployment(
        scenario, replicas=replicas, simulated=simulated, clock=SimClock("realtime", 1.0)
    )

    class StaticServer(SimServer):
        """Baseline: same server, one pre-rendered body, no simulation."""

        body = b""

        async def _replica_endpoint(self, path, q, i):
            return Response(200, self.body, TEXT_FORMAT)

        async def _tick(self) -> None:
            return None

    if mode == "static":
        dep.advance = None  # type: ignore[assignment]
        eng = dep.engines[0]
        eng.advance_to(120.0)
        StaticServer.body = vllm.render_v1(eng, "0").encode()
        srv: SimServer = StaticServer(dep, port=0)
    else:
        srv = SimServer(dep, port=0)

    async def main() -> None:
        await srv.start()
        print(srv.ports["main"], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await srv.close()

    asyncio.run(main())


# ----------------------------------------------------------------------------- client side
async def _scrape_all(port: int, replicas: int, conns: int = 32) -> tuple[float, int]:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(replicas):
        queue.put_nowait(i)
    total = 0

    async def worker() -> None:
        nonlocal total
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                writer.write(f"GET /replicas/{i}/metrics HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                if status != 200:
                    raise RuntimeError(f"replica {i}: HTTP {status}")
                total += len(body)
        finally:
            writer.close()
            await writer.wait_closed()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(conns, replicas))))
    return time.perf_counter() - t0, total


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:  # noqa: PTH123
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(mode: str, replicas: int, cycles: int, scenario: str, simulated: int | None) -> dict:
    cmd = [sys.executable, __file__, "--serve", mode, "--replicas", str(replicas),
           "--scenario", scenario]  # fmt: skip
    if simulated:
        cmd += ["--simulated", str(simulated)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline())
        time.sleep(1.0)  # let the simulation run for a while before the first sweep
        sweeps, cpu = [], []
        nbytes = 0
        for _ in range(cycles):
            c0 = _cpu_of(proc.pid)
            w0 = time.perf_counter()
            dt, nbytes = asyncio.run(_scrape_all(port, replicas))
            sweeps.append(dt)
            time.sleep(max(0.0, INTERVAL_S - (time.perf_counter() - w0)))
            # Server CPU share of one core over the cycle (a sweep may overrun the interval).
            cpu.append((_cpu_of(proc.pid) - c0) / (time.perf_counter() - w0))
        with open(f"/proc/{proc.pid}/status") as f:  # noqa: PTH123
            rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024
        return {
            "rss_mib": rss,
            "sweep_s": max(sweeps),
            "server_cpu": sum(cpu) / len(cpu),
            "bytes": nbytes,
        }
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--serve", choices=("static", "sim"))
    ap.add_argument("--replicas", type=int, default=100)
    ap.add_argument("--sizes", default="200,400,800,1600")
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--scenario", default="healthy")
    ap.add_argument("--simulated", type=int, default=None)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.replicas, args.scenario, args.simulated)
        return 0
    print(f"enginesim fan-out bench: scrape interval {INTERVAL_S:.0f} s, {os.cpu_count()} CPUs, "
          f"scenario {args.scenario}, simulated engines: {args.simulated or 'all'}")  # fmt: skip
    print("baseline = 'static': same server, one pre-rendered body, no simulation")
    print(f"{'replicas':>8} {'static sweep':>13} {'sim sweep':>10} {'sweep ratio':>12} "
          f"{'static cpu':>11} {'sim cpu':>8} {'sim RSS':>8} {'fits 5s':>8}")  # fmt: skip
    best = 0
    for n in (int(x) for x in args.sizes.split(",")):
        base = measure("static", n, args.cycles, args.scenario, args.simulated)
        sim = measure("sim", n, args.cycles, args.scenario, args.simulated)
        fits = sim["sweep_s"] < INTERVAL_S and sim["server_cpu"] < 0.95
        best = n if fits else best
        print(
            f"{n:>8} {base['sweep_s']:>12.3f}s {sim['sweep_s']:>9.3f}s "
            f"{sim['sweep_s'] / base['sweep_s']:>11.1f}x {base['server_cpu']:>10.0%} "
            f"{sim['server_cpu']:>7.0%} {sim['rss_mib']:>6.0f}Mi {'yes' if fits else 'no':>8}",
            flush=True,
        )
    print(f"largest fleet served within the 5 s interval: {best} replicas "
          "(server CPU < 95 % of one core and sweep < 5 s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
