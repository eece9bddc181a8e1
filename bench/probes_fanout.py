"""How many engine endpoints does one worker poll, parse and store per 5 s cycle?

An enginesim subprocess serves N replicas (`/replicas/{i}/metrics`, vLLM V1 format,
mirrors beyond `--simulated` engines to keep the simulator's own CPU small). The bench
registers N engine targets in a throwaway database and runs the real poll path
(`probes.tasks.poll_targets`: concurrent guarded fetch, parse, windowed statistics,
bulk store) for a few cycles per size, against a named baseline measured in the same run:

    baseline "fetch-only": the same concurrent guarded fetch of the same N endpoints,
    with no parsing and no storage.

A size "fits" when the full cycle finishes within the 5 s interval. Ratios are what
carry across machines; nothing asserts absolute times.

    .venv/bin/python bench/probes_fanout.py                    # sizes 250,500,1000,1500
    .venv/bin/python bench/probes_fanout.py --sizes 100 --cycles 2
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
INTERVAL_S = 5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    for _ in range(300):
        try:
            urllib.request.urlopen(base + "/health", timeout=1).read()  # noqa: S310 - loopback
            return process, base
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("enginesim did not start")


def _setup_django(data_dir: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")
    os.environ["ATLAS_DATA_DIR"] = data_dir
    import django
    from django.core.management import call_command

    django.setup()
    if os.environ.get("DATABASE_URL"):
        # Use a dedicated database on the server: the bench must not touch real data.
        raise SystemExit("set no DATABASE_URL: the bench creates its own SQLite database")
    call_command("migrate", verbosity=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="250,500,1000,1500")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--simulated", type=int, default=32)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    with tempfile.TemporaryDirectory() as data_dir:
        _setup_django(data_dir)
        from deployments.models import Deployment
        from probes.collect import fetch_all
        from probes.models import Observation, Target, TargetKind
        from probes.policy import fetch_policy
        from probes.tasks import poll_targets
        from teams.models import Team

        team = Team.objects.create(name="bench")
        policy = fetch_policy()
        print(f"{'targets':>8} {'fetch-only s':>13} {'full cycle s':>13} {'ratio':>6} "
              f"{'obs/cycle':>10} {'fits 5 s':>8}")  # fmt: skip
        for size in sizes:
            process, base = _start_sim(size, min(args.simulated, size))
            try:
                deployment = Deployment.objects.create(team=team, name=f"fleet-{size}")
                targets = Target.objects.bulk_create(
                    Target(
                        deployment=deployment,
                        kind=TargetKind.ENGINE,
                        url=f"{base}/replicas/{i}/metrics",
                        replica=str(i),
                    )
                    for i in range(size)
                )
                requests = [(str(t.pk), t.url) for t in targets]
                fetch_times, cycle_times = [], []
                start = datetime(2026, 1, 1, tzinfo=UTC)
                for n in range(args.cycles):
                    began = time.perf_counter()
                    fetched = fetch_all(requests, policy)
                    fetch_times.append(time.perf_counter() - began)
                    errors = sum(1 for f in fetched if f.error)
                    if errors:
                        print(f"  warning: {errors} fetch errors at size {size}")
                    cycle = start + timedelta(seconds=INTERVAL_S * n)
                    began = time.perf_counter()
                    poll_targets(list(Target.objects.filter(deployment=deployment)), cycle)
                    cycle_times.append(time.perf_counter() - began)
                observations = Observation.objects.filter(
                    target__deployment=deployment, taken_at=cycle
                ).count()
                fetch_s, cycle_s = min(fetch_times), min(cycle_times)
                print(
                    f"{size:>8} {fetch_s:>13.2f} {cycle_s:>13.2f} {cycle_s / fetch_s:>6.1f} "
                    f"{observations:>10} {'yes' if cycle_s <= INTERVAL_S else 'no':>8}"
                )
            finally:
                process.terminate()
                process.wait(timeout=10)


if __name__ == "__main__":
    main()
