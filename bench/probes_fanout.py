"""How many engine endpoints does one worker poll, parse and store per 5 s cycle, and at
what CPU per endpoint beside a real Prometheus scraping the same endpoints?

An enginesim subprocess serves N replicas (`/replicas/{i}/metrics`, vLLM V1 format,
mirrors beyond `--simulated` engines to keep the simulator's own CPU small). The bench
registers N engine targets in a throwaway database and runs the real poll task's body
(`probes.tasks.poll_cycle`: claim, concurrent guarded fetch, parse, windowed statistics,
store, release) cycle after cycle on the 5 s grid. The windowed statistics read up to
60 s of earlier snapshots, so a cycle costs more until the window is full: only cycles
after the window has filled (steady state) are reported.

Named baseline, measured in the same run on the same endpoints: a real Prometheus
(`prometheus` on PATH) scraping all N every 5 s into its own TSDB; its CPU is read from
/proc/<pid>/stat over a span after its start-up. The worker's CPU is the process's
(resource.getrusage: user + system), and beside it the PostgreSQL backend's that served
it (/proc/<pid>/stat), since Prometheus's storage is inside its own process.

The bench runs the cycles under the collector policy of the worker
(``atlas_console.gc_policy``: start-up heap frozen, young collections every 50,000 net
allocations), applied after the set-up as a worker applies it after its init;
``--gc-default`` keeps CPython's defaults. The "gc s" column is the time the cyclic
collector itself took per cycle (``gc.callbacks``), inside the worker's CPU.

A size "fits" when the steady-state cycle finishes within the 5 s interval; endpoints
per 5 s cycle is N x 5 s / (steady cycle wall time). Ratios are what carry across
machines; nothing asserts absolute times.

    .venv/bin/python bench/probes_fanout.py --postgres postgres://postgres@127.0.0.1:5432
    .venv/bin/python bench/probes_fanout.py --sizes 250 --steady 2     # SQLite, short
    .venv/bin/python bench/probes_fanout.py --postgres ... --sizes 1000 --profile out.prof
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
INTERVAL_S = 5
WINDOW_S = 60
# Cycles before the window is full: the first cycle whose history spans the whole
# window (probes.tasks reads (cycle - 61 s, cycle)) is number WINDOW_S / INTERVAL_S + 1.
FILL_CYCLES = WINDOW_S // INTERVAL_S + 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, what: str, tries: int = 300) -> None:
    for _ in range(tries):
        try:
            urllib.request.urlopen(url, timeout=1).read()  # noqa: S310 - loopback
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not start")


def _start_sim(replicas: int, simulated: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable, "-m", "enginesim", "--scenario", "healthy", "--port", str(port),
            "--replicas", str(replicas), "--simulated", str(simulated), "--speed", "1",
        ],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(base + "/health", "enginesim")
    except SystemExit:
        process.kill()
        raise
    return process, base


def _cpu_of(pid: int) -> float:
    """CPU-seconds (user + system) a process has used, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:  # noqa: PTH123
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _CollectorTime:
    """CPU seconds spent inside the cyclic collector, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.total = 0.0
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.total += time.process_time() - self._started


COLLECTOR = _CollectorTime()


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def _throwaway_postgres(server: str) -> Iterator[str]:
    """A fresh database on the server for this run, dropped afterwards."""
    import psycopg

    parts = urllib.parse.urlsplit(server)
    name = f"atlas_fanout_bench_{os.getpid()}"
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield parts._replace(path=f"/{name}").geturl()
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _setup_django(data_dir: str, database_url: str | None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")
    os.environ["ATLAS_DATA_DIR"] = data_dir
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _backend_pid() -> int | None:
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def prometheus_per_cycle(base: str, size: int, span_s: float, warm_s: float) -> dict:
    """A real Prometheus scraping the same N endpoints every 5 s: CPU-s per cycle."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("no prometheus on PATH: the baseline cannot be measured")
    host = urllib.parse.urlsplit(base).netloc
    targets = "\n".join(
        f"      - targets: ['{host}']\n"
        f"        labels: {{__metrics_path__: '/replicas/{i}/metrics', replica: '{i}'}}"
        for i in range(size)
    )
    config = (
        f"global:\n  scrape_interval: {INTERVAL_S}s\n  scrape_timeout: 4s\n"
        f"scrape_configs:\n  - job_name: engines\n    static_configs:\n{targets}\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "prometheus.yml").write_text(config)
        port = _free_port()
        process = subprocess.Popen(
            [
                binary, f"--config.file={tmp}/prometheus.yml",
                f"--storage.tsdb.path={tmp}/data", f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            api = f"http://127.0.0.1:{port}"
            _wait_http(api + "/-/ready", "prometheus")
            time.sleep(warm_s)  # start-up, first scrapes, series creation
            cpu0, t0 = _cpu_of(process.pid), time.monotonic()
            time.sleep(span_s)
            cpu1, t1 = _cpu_of(process.pid), time.monotonic()
            query = urllib.parse.urlencode({"query": "count(up == 1)"})
            with urllib.request.urlopen(f"{api}/api/v1/query?{query}", timeout=5) as r:  # noqa: S310
                import json

                result = json.loads(r.read())["data"]["result"]
            up = int(float(result[0]["value"][1])) if result else 0
        finally:
            process.terminate()
            process.wait(timeout=30)
    cycles = (t1 - t0) / INTERVAL_S
    return {"cpu_per_cycle": (cpu1 - cpu0) / cycles, "up": up}


class StatementCosts:
    """Django execute wrapper: the PostgreSQL backend's CPU and the worker's wall time per
    statement shape (its first words up to the first parameter or value), so the database's
    share of a cycle can be told apart by query. /proc counts in clock ticks (10 ms): read
    over many cycles or big statements, not one small query."""

    def __init__(self, backend: int) -> None:
        self.backend = backend
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    @staticmethod
    def shape(sql: str) -> str:
        head = " ".join(sql.split())
        for stop in (" VALUES", " WHERE", " SET", " SELECT (", " FROM unnest"):
            if stop in head[8:]:
                head = head[: head.index(stop, 8)]
        return head[:90]

    def __call__(self, execute, sql, params, many, context):
        key = self.shape(sql)
        cpu0, wall0 = _cpu_of(self.backend), time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.cpu[key] = self.cpu.get(key, 0.0) + _cpu_of(self.backend) - cpu0
            self.wall[key] = self.wall.get(key, 0.0) + time.perf_counter() - wall0
            self.calls[key] = self.calls.get(key, 0) + 1

    def report(self, cycles: int, size: int) -> None:
        total = sum(self.cpu.values()) or 1.0
        print(f"  PostgreSQL CPU by statement, per cycle ({cycles} cycles, {size} targets):")
        for key, cpu in sorted(self.cpu.items(), key=lambda kv: -kv[1]):
            wall, calls = self.wall[key] / cycles, self.calls[key] // cycles
            print(f"    {cpu / cycles:7.3f} s {100 * cpu / total:5.1f} %  wall {wall:6.3f} s"
                  f"  x{calls:<4} {key}")  # fmt: skip


def poll_steady(deployment, cycles: int, steady: int, profiler: cProfile.Profile | None,
                statements: bool = False) -> dict:  # fmt: skip
    """Run ``cycles`` poll cycles; averages over the last ``steady`` (window full)."""
    from django.db import connection

    from probes.models import Poll
    from probes.tasks import poll_cycle

    backend = _backend_pid()
    costs = StatementCosts(backend) if statements and backend else None
    start = datetime(2026, 1, 1, tzinfo=UTC)
    walls, cpus, db_cpus, gcs, stored = [], [], [], [], 0
    for n in range(cycles):
        cycle = start + timedelta(seconds=INTERVAL_S * n)
        measured = n >= cycles - steady
        if measured and profiler:
            profiler.enable()
        wall0, cpu0, gc0 = time.perf_counter(), _own_cpu(), COLLECTOR.total
        db0 = _cpu_of(backend) if backend else 0.0
        with connection.execute_wrapper(costs) if measured and costs else contextlib.nullcontext():
            stored = poll_cycle(deployment.pk, cycle)
        wall, cpu = time.perf_counter() - wall0, _own_cpu() - cpu0
        db = (_cpu_of(backend) - db0) if backend else 0.0
        if measured and profiler:
            profiler.disable()
        if measured:
            walls.append(wall)
            cpus.append(cpu)
            db_cpus.append(db)
            gcs.append(COLLECTOR.total - gc0)
        # Keep real time roughly on the grid so the simulator's counters move.
        time.sleep(max(0.0, INTERVAL_S - wall) if measured else 0.2)
    if costs:
        costs.report(steady, deployment.targets.count())
    failed = Poll.objects.filter(target__deployment=deployment, ok=False).count()
    return {
        "wall": sum(walls) / len(walls),
        "cpu": sum(cpus) / len(cpus),
        "db_cpu": sum(db_cpus) / len(db_cpus),
        "gc": sum(gcs) / len(gcs),
        "stored": stored,
        "failed": failed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,1000,2000")
    parser.add_argument(
        "--postgres",
        metavar="SERVER_URL",
        help="a PostgreSQL server URL (postgres://user@host:port): the bench creates and "
        "drops its own database there; without it, a temporary SQLite database",
    )
    parser.add_argument(
        "--steady", type=int, default=3, help="cycles measured once the window is full"
    )
    parser.add_argument("--simulated", type=int, default=32)
    parser.add_argument("--prom-span", type=float, default=30.0, help="seconds of Prometheus CPU")
    parser.add_argument("--no-prometheus", action="store_true")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the steady cycles to FILE")
    parser.add_argument(
        "--statements", action="store_true",
        help="PostgreSQL: the backend's CPU per statement shape over the steady cycles",
    )  # fmt: skip
    parser.add_argument(
        "--gc-default", action="store_true", help="CPython's collector defaults, not the worker's"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if os.environ.get("DATABASE_URL"):
        raise SystemExit("set no DATABASE_URL: give --postgres SERVER_URL, or none for SQLite")
    cycles = FILL_CYCLES + args.steady

    with contextlib.ExitStack() as stack:
        data_dir = stack.enter_context(tempfile.TemporaryDirectory())
        url = stack.enter_context(_throwaway_postgres(args.postgres)) if args.postgres else None
        _setup_django(data_dir, url)
        from deployments.models import Deployment
        from probes.models import Target, TargetKind
        from teams.models import Team

        team = Team.objects.create(name="bench")
        if args.gc_default:
            print(f"collector: CPython's defaults, thresholds {gc.get_threshold()}")
        else:
            from atlas_console.gc_policy import tune_for_worker

            print(f"collector: the worker's policy, thresholds {tune_for_worker()}")
        # CPU time, not wall: waits on the database and the network are not costs here.
        profiler = cProfile.Profile(time.process_time) if args.profile else None
        print(f"database: {'PostgreSQL' if url else 'SQLite'}; {cycles} cycles per size, "
              f"the last {args.steady} (window full) measured")  # fmt: skip
        print(f"{'targets':>8} {'cycle s':>8} {'fits 5 s':>8} {'endpoints/5s':>12} "
              f"{'CPU s/cycle':>11} {'db CPU s':>8} {'prom CPU s':>10} {'ms/endpoint':>11} "
              f"{'db ms':>6} {'prom ms':>8} {'ratio':>6} {'w/ db':>6} {'gc s':>6}")  # fmt: skip
        for size in sizes:
            process, base = _start_sim(size, min(args.simulated, size))
            try:
                deployment = Deployment.objects.create(
                    team=team, name=f"fleet-{size}", poll_interval_s=INTERVAL_S
                )
                Target.objects.bulk_create(
                    Target(
                        deployment=deployment,
                        kind=TargetKind.ENGINE,
                        url=f"{base}/replicas/{i}/metrics",
                        replica=str(i),
                    )
                    for i in range(size)
                )
                ours = poll_steady(deployment, cycles, args.steady, profiler, args.statements)
                if args.no_prometheus:
                    prom = {"cpu_per_cycle": float("nan"), "up": 0}
                else:
                    prom = prometheus_per_cycle(base, size, args.prom_span, warm_s=12)
            finally:
                process.terminate()
                process.wait(timeout=10)
            if ours["failed"] or ours["stored"] != size:
                print(f"  warning: {ours['failed']} failed polls, {ours['stored']} stored "
                      f"in the last cycle")  # fmt: skip
            if not args.no_prometheus and prom["up"] != size:
                print(f"  warning: Prometheus had {prom['up']} of {size} targets up")
            per = 1000 / size
            total = ours["cpu"] + ours["db_cpu"]
            prom_cpu = prom["cpu_per_cycle"]
            fits = "yes" if ours["wall"] <= INTERVAL_S else "no"
            print(
                f"{size:>8} {ours['wall']:>8.2f} {fits:>8} "
                f"{size * INTERVAL_S / ours['wall']:>12.0f} {ours['cpu']:>11.2f} "
                f"{ours['db_cpu']:>8.2f} {prom_cpu:>10.2f} {ours['cpu'] * per:>11.2f} "
                f"{ours['db_cpu'] * per:>6.2f} {prom_cpu * per:>8.2f} "
                f"{ours['cpu'] / prom_cpu:>6.1f} {total / prom_cpu:>6.1f} {ours['gc']:>6.2f}"
            )
        if profiler:
            profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
