"""Load on the investigation page: throughput and p50/p95/p99 at 50 concurrent users.

Sets up a PostgreSQL database of its own (dropped and recreated each run; its name must end
in ``_bench``) with a deployment of simulated engines, an open high-TTFT investigation with
its playbook, a few decisions, and some thousands of observations stored by the real poll
path (`probes.tasks.poll_targets` against an enginesim subprocess, cycles back-dated over
the last minutes). Then it serves the product with gunicorn on 127.0.0.1 (2 x cores
workers), logs in, and drives Debian's `wrk` (`bench/wrk/report.lua`) against:

    baseline "healthz": /healthz (one SELECT 1, no session, no template)
    "page":             the investigation page, logged in
    "tree":             the htmx tree partial the page refreshes every cycle

each for a bounded run (--duration seconds, at most --max-requests answers). Prints
requests/s, p50/p95/p99 and the errors (non-2xx and socket errors; exit 1 if any), and the
page/healthz ratios, which are what carry across machines.

    .venv/bin/python bench/load_investigation_page.py
    .venv/bin/python bench/load_investigation_page.py --duration 5 --cycles 24
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LUA = ROOT / "bench" / "wrk" / "report.lua"
INTERVAL_S = 5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()  # noqa: S310 - loopback only
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {timeout:g} s")


def _recreate_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if not name.endswith("_bench"):
        raise SystemExit(f"refusing to drop {name!r}: the bench database's name must end in _bench")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _seed(sim: str, replicas: int, cycles: int) -> tuple[str, str, int]:
    """(investigation id, session cookie, observations stored)."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from django.utils import timezone

    from deployments.models import Deployment
    from investigations import actions
    from probes.cycles import cycle_start
    from probes.models import Observation, Target, TargetKind
    from probes.tasks import poll_targets
    from teams.models import Membership, Role, Team

    call_command("migrate", verbosity=0)
    team = Team.objects.create(name="Atlas serving")
    user = get_user_model().objects.create_user(username="cora", password=secrets.token_hex(16))
    Membership.objects.create(team=team, user=user, role=Role.COMMANDER)
    deployment = Deployment.objects.create(team=team, name="atlas-70b-prod")
    Target.objects.bulk_create(
        Target(
            deployment=deployment,
            kind=TargetKind.ENGINE,
            url=f"{sim}/replicas/{i}/metrics",
            replica=f"replica-{i}",
        )
        for i in range(replicas)
    )
    Target.objects.create(deployment=deployment, kind=TargetKind.DCGM, url=f"{sim}/dcgm/metrics")
    targets = list(Target.objects.filter(deployment=deployment))
    now = cycle_start(timezone.now(), INTERVAL_S)
    for n in range(cycles, 0, -1):
        poll_targets(targets, now - timedelta(seconds=INTERVAL_S * n))
        time.sleep(0.05)  # let the simulator's counters move between cycles
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=user
    )
    for node, action in (("router-latency", "eliminate"), ("kv-cache-pressure", "confirm")):
        actions.decide(
            investigation=investigation, node=node, action=action, user=user, evidence={},
            reason=f"{action} from the bench's seeded evidence",
        )  # fmt: skip
    client = Client()
    client.force_login(user)
    observations = Observation.objects.filter(target__deployment=deployment).count()
    return str(investigation.pk), f"sessionid={client.cookies['sessionid'].value}", observations


def _wrk(url: str, args, headers: dict[str, str]) -> dict:
    command = [
        "wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{args.duration}s",
        "--timeout", "10s", "--latency", "-s", str(LUA),
    ]  # fmt: skip
    for key, value in headers.items():
        command += ["-H", f"{key}: {value}"]
    per_thread = max(1, args.max_requests // args.threads)
    result = subprocess.run(
        [*command, url, "--", str(per_thread)],
        capture_output=True, text=True, timeout=args.duration + 60, check=False,
    )  # fmt: skip
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"wrk failed ({result.returncode}): {result.stderr}{result.stdout}")
    report = json.loads(lines[-1])
    report["rps"] = report["requests"] / (report["duration_us"] / 1e6)
    report["errors"] = sum(
        report[k] for k in ("non2xx", "connect_errors", "read_errors", "write_errors", "timeouts")
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "ATLAS_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/atlas_faults_bench"
        ),
    )
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--duration", type=int, default=15, help="seconds per URL (cap)")
    parser.add_argument("--max-requests", type=int, default=50_000, help="per URL (cap)")
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--gunicorn-threads", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=72, help="back-dated poll cycles (5 s)")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk)")

    data_dir = tempfile.mkdtemp(prefix="atlas-load-")
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "ATLAS_", "DJANGO"))
    }
    environment.update(
        {
            "DATABASE_URL": args.database_url,
            "ATLAS_DATA_DIR": data_dir,
            "ATLAS_SECRET_KEY": secrets.token_urlsafe(64),
            "ATLAS_LOG_LEVEL": "warning",
            "DJANGO_SETTINGS_MODULE": "atlas_console.settings",
        }
    )
    os.environ.update(environment)
    _recreate_database(args.database_url)
    import django

    django.setup()
    processes: list[subprocess.Popen] = []
    try:
        sim_port = _free_port()
        simulator = [
            sys.executable, "-m", "enginesim", "--scenario", "kv-pressure",
            "--port", str(sim_port), "--replicas", str(args.replicas), "--speed", "10",
        ]  # fmt: skip
        processes.append(
            subprocess.Popen(
                simulator, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        sim = f"http://127.0.0.1:{sim_port}"
        _wait_http(sim + "/health")
        began = time.perf_counter()
        investigation, cookie, observations = _seed(sim, args.replicas, args.cycles)
        print(
            f"seeded {observations} observations over {args.cycles} cycles x "
            f"{args.replicas + 1} targets in {time.perf_counter() - began:.1f} s"
        )
        from django.db import connections

        connections.close_all()

        port = _free_port()
        log = Path(data_dir) / "gunicorn.log"
        web = [
            sys.executable, "-m", "gunicorn", "atlas_console.wsgi",
            "--bind", f"127.0.0.1:{port}", "--workers", str(args.workers),
            "--threads", str(args.gunicorn_threads), "--timeout", "30",
        ]  # fmt: skip
        with log.open("w") as out:
            processes.append(
                subprocess.Popen(
                    web, cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT
                )
            )
        base = f"http://127.0.0.1:{port}"
        _wait_http(base + "/healthz")
        page = f"{base}/investigations/{investigation}/"
        request = urllib.request.Request(page, headers={"Cookie": cookie})  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            body = response.read()
            if response.url != page or b"kv-cache-pressure" not in body:
                raise SystemExit("the session cookie does not open the investigation page")
        runs = {
            "healthz": (base + "/healthz", {}),
            "page": (page, {"Cookie": cookie}),
            "tree": (page + "tree/", {"Cookie": cookie, "HX-Request": "true"}),
        }
        print(
            f"gunicorn {args.workers} workers x {args.gunicorn_threads} threads; wrk "
            f"-t{args.threads} -c{args.connections}, <= {args.duration} s and "
            f"<= {args.max_requests} answers per URL; page body {len(body)} bytes"
        )
        for url, headers in runs.values():  # warm every worker's connection and caches
            _wrk(url, argparse.Namespace(**{**vars(args), "duration": 2}), headers)
        print(f"{'url':>8} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
              f"{'requests':>9} {'errors':>7}")  # fmt: skip
        results = {}
        for name, (url, headers) in runs.items():
            r = results[name] = _wrk(url, args, headers)
            print(
                f"{name:>8} {r['rps']:>8.1f} {r['p50_us'] / 1000:>8.1f} "
                f"{r['p95_us'] / 1000:>8.1f} {r['p99_us'] / 1000:>8.1f} "
                f"{r['requests']:>9} {r['errors']:>7}"
            )
        baseline = results["healthz"]
        for name in ("page", "tree"):
            r = results[name]
            print(
                f"{name}/healthz: throughput x{r['rps'] / baseline['rps']:.3f}, "
                f"p95 x{r['p95_us'] / max(1, baseline['p95_us']):.1f}, "
                f"p99 x{r['p99_us'] / max(1, baseline['p99_us']):.1f}"
            )
        errors = sum(r["errors"] for r in results.values())
        print(f"errors (non-2xx + socket): {errors}")
        if errors:
            print(log.read_text()[-3000:])
            raise SystemExit(1)
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
