"""Do the good targets keep their cycles and does /healthz keep answering under a hostile mix?

Issue 19's closing bar: "under a mix of one hostile target of each kind, a 4 GiB-expanding
artifact and 50 slow clients, the good targets of every deployment fill >= 95 % of their
cycles and /healthz answers within 1 s throughout".

The whole product runs for real, as deploy/Procfile starts it: gunicorn with the shipped
config (deploy/gunicorn.conf.py), the polling worker, the artifact worker and beat, on a
private ``redis-server`` and a throwaway PostgreSQL database (``<DATABASE_URL's
name>_hostile_mix``, created and dropped here). A hostile HTTP server on 127.0.0.1
(tests/support/hostile.py) serves the good ``/metrics`` and every misbehaviour.

Two phases in one run, each the same length, the first the named baseline:

    baseline "quiet":  D deployments under investigation, one good engine target each.
    "hostile":         the same, plus on the first deployment one target of each hostile
                       kind (hang, slow, 50 MB, gzip bomb, endless 1-byte chunks, garbage,
                       header bomb, metadata redirect, redirect loop, 503, a log relay
                       whose offset overflows 64 bits), a gzip trace expanding past 4 GiB
                       uploaded through the API, and S slowloris clients on the web port.

Measured per phase: each good target's filled cycles over the cycles of the poll grid in
the phase (the first and last cycle left out), and /healthz sampled every 0.5 s from a
client thread (latency, and any sample over 1 s or failed). Printed with the hostile/quiet
ratios; ratios are what carry across machines, nothing here asserts.

    DATABASE_URL=postgres:///atlas .venv/bin/python bench/hostile_mix.py
    DATABASE_URL=postgres:///atlas .venv/bin/python bench/hostile_mix.py --seconds 60
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOSTILE_ENGINE_PATHS = (
    "hang", "slow", "huge", "gzip-bomb", "drip-chunked", "garbage", "header-bomb",
    "redirect-metadata", "redirect-loop", "error",
)  # fmt: skip
EXPANDED_BYTES = 4 * 1024**3 + 1024**2  # just past the 4 GiB default expansion cap
EVENT = b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":1},'
HEALTHZ_EVERY_S = 0.5
HEALTHZ_BOUND_S = 1.0


def _bench_database(url: str) -> tuple[str, str]:
    """(the throwaway database's URL, its name), on the server ``url`` names."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise SystemExit("set DATABASE_URL=postgres://...: the bench needs a PostgreSQL server")
    name = (parts.path.lstrip("/") or "atlas") + "_hostile_mix"
    return _with_database(parts, name), name


def _with_database(parts, name: str) -> str:
    # Built by hand: urlunsplit drops the empty host of postgres:///db (a local socket).
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}/{name}{query}"


def _admin(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(_with_database(urlsplit(url), "postgres"), autocommit=True) as conn:
        conn.execute(sql)


def _trace_bomb() -> bytes:
    """A valid Chrome trace whose gzip members expand past 4 GiB of real events (blanks are
    refused after 16 MiB in a row, so they would not hold the worker): one block of 10,000
    events compressed once and repeated (~3 KB per ~0.8 MB of events, ~15 MB in all), as
    tests/faults/test_artifact_queue.py builds its endless traces."""
    block_events = 10_000
    block = gzip.compress(EVENT * block_events, compresslevel=6)
    blocks = EXPANDED_BYTES // (len(EVENT) * block_events) + 1
    return gzip.compress(b'{"traceEvents":[') + block * blocks + gzip.compress(EVENT[:-1] + b"]}")


class Healthz(threading.Thread):
    """Samples /healthz every HEALTHZ_EVERY_S: (unix time, seconds or None if it failed)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[tuple[float, float | None]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            at = time.time()
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:  # noqa: S310
                    response.read()
                    took: float | None = (
                        time.monotonic() - started if response.status == 200 else None
                    )
            except OSError:
                took = None
            self.samples.append((at, took))
            self.stop.wait(max(0.0, HEALTHZ_EVERY_S - (time.monotonic() - started)))

    def between(self, start: float, end: float) -> list[float | None]:
        return [took for at, took in self.samples if start <= at < end]


def _fills(targets, start: float, end: float, interval: int) -> dict[str, tuple[int, int]]:
    """Per good target: (cycles stored, cycles of the grid) for the cycles that began after
    the phase's first cycle and ended before it did."""
    from probes.models import Poll

    first = (int(start) // interval + 1) * interval
    last = (int(end) // interval - 2) * interval  # its poll has had a whole cycle to land
    grid = list(range(first, last + 1, interval))
    out = {}
    for target in targets:
        stored = {
            int(at.timestamp())
            for at in Poll.objects.filter(
                target=target,
                ok=True,
                cycle_at__gte=datetime.fromtimestamp(first, tz=UTC),
                cycle_at__lte=datetime.fromtimestamp(last, tz=UTC),
            ).values_list("cycle_at", flat=True)
        }
        out[target.deployment.name] = (len(stored & set(grid)), len(grid))
    return out


def _healthz_figures(samples: list[float | None]) -> dict[str, float]:
    answered = sorted(s for s in samples if s is not None)
    over = sum(1 for s in samples if s is None or s > HEALTHZ_BOUND_S)
    return {
        "samples": len(samples),
        "failed": sum(1 for s in samples if s is None),
        "over_1s": over,
        "p50_ms": 1e3 * statistics.median(answered) if answered else float("nan"),
        "p99_ms": 1e3 * answered[min(len(answered) - 1, int(0.99 * len(answered)))]
        if answered
        else float("nan"),
        "max_ms": 1e3 * answered[-1] if answered else float("nan"),
    }


def _upload(base: str, investigation, token: str, body: bytes) -> dict:
    from django.urls import reverse

    url = base + reverse("artifacts:api_upload", args=[investigation.pk]) + "?name=bomb.json.gz"
    request = urllib.request.Request(  # noqa: S310 - loopback
        url,
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
        return json.loads(response.read())


@contextlib.contextmanager
def _stack(args, data_dir: Path, database_url: str, redis_url: str, port: int) -> Iterator[None]:
    from tests.support.services import (
        celery_artifact_worker_args,
        celery_beat_args,
        celery_worker_args,
        gunicorn_args,
        product_env,
        product_process,
    )

    environment = product_env(
        database_url=database_url, broker_url=redis_url, data_dir=data_dir, extra={}
    )
    with (
        product_process("web", gunicorn_args(port, workers=2), environment, data_dir),
        product_process("worker", celery_worker_args(), environment, data_dir),
        product_process("artifact-worker", celery_artifact_worker_args(), environment, data_dir),
        product_process("beat", celery_beat_args(data_dir), environment, data_dir),
    ):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=90, help="length of each phase")
    parser.add_argument("--deployments", type=int, default=3)
    parser.add_argument("--slow-clients", type=int, default=50)
    parser.add_argument("--interval", type=int, default=5, help="poll interval (s)")
    args = parser.parse_args()

    database_url, name = _bench_database(os.environ.get("DATABASE_URL", ""))
    _admin(database_url, f'DROP DATABASE IF EXISTS "{name}"')
    _admin(database_url, f'CREATE DATABASE "{name}"')
    data_dir = Path(tempfile.mkdtemp(prefix="atlas-hostile-mix-"))
    os.environ.update({"DATABASE_URL": database_url, "ATLAS_DATA_DIR": str(data_dir)})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    try:
        _run(args, data_dir, database_url)
    finally:
        from django.db import connections

        connections.close_all()
        _admin(database_url, f'DROP DATABASE IF EXISTS "{name}"')


def _run(args, data_dir: Path, database_url: str) -> None:
    from django.contrib.auth import get_user_model

    from deployments.models import Deployment
    from investigations import actions
    from investigations.tokens import create_token
    from probes.models import Target, TargetKind
    from teams.models import Membership, Role, Team
    from tests.faults.test_slow_clients import slow_clients
    from tests.support.hostile import hostile_server
    from tests.support.services import RedisServer, free_port, wait_for_http, wait_until

    team = Team.objects.create(name="Bench")
    user = get_user_model().objects.create_user(username="bench", password="x" * 20)
    Membership.objects.create(team=team, user=user, role=Role.COMMANDER)
    token = create_token(team=team, name="bench", user=user)[1]
    redis = RedisServer(free_port(), data_dir)
    redis.start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    try:
        with hostile_server() as hostile, _stack(args, data_dir, database_url, redis.url, port):
            deployments, good, investigations = [], [], []
            for i in range(args.deployments):
                deployment = Deployment.objects.create(
                    team=team, name=f"bench-{i}", poll_interval_s=args.interval
                )
                good.append(
                    Target.objects.create(
                        deployment=deployment,
                        kind=TargetKind.ENGINE,
                        url=hostile + "/metrics",
                        replica="good",
                    )
                )
                investigations.append(
                    actions.open_investigation(
                        deployment=deployment, symptom="high-ttft", user=user
                    )
                )
                deployments.append(deployment)
            if not wait_for_http(base, 60):
                raise SystemExit("the web server did not answer /healthz\n" + _tail(data_dir))
            from probes.models import Poll

            if not wait_until(lambda: Poll.objects.filter(target__in=good).exists(), 90):
                raise SystemExit("no poll was stored\n" + _tail(data_dir))
            sampler = Healthz(base + "/healthz")
            sampler.start()

            quiet = (time.time(), None)
            time.sleep(args.seconds)
            quiet = (quiet[0], time.time())

            victim = deployments[0]
            for path in HOSTILE_ENGINE_PATHS:
                Target.objects.create(
                    deployment=victim, kind=TargetKind.ENGINE, url=f"{hostile}/{path}",
                    replica=path,
                )  # fmt: skip
            relay = Target.objects.create(
                deployment=victim, kind=TargetKind.LOG_HTTP, url=hostile + "/log-huge-offset",
                replica="log-huge-offset",
            )  # fmt: skip
            Target.objects.filter(pk=relay.pk).update(log_offset=120)
            started = time.time()
            bomb = _trace_bomb()
            with slow_clients(port, args.slow_clients):
                uploaded = _upload(base, investigations[0], token, bomb)
                time.sleep(max(0.0, args.seconds - (time.time() - started)))
                hostile_phase = (started, time.time())
            sampler.stop.set()
            sampler.join(timeout=15)
            _report(args, good, quiet, hostile_phase, sampler, uploaded, len(bomb))
    finally:
        redis.stop()


def _report(args, good, quiet, hostile, sampler, uploaded, bomb_bytes) -> None:
    from artifacts.models import Artifact
    from probes.models import Poll

    fills = {
        "quiet": _fills(good, *quiet, args.interval),
        "hostile": _fills(good, *hostile, args.interval),
    }
    health = {
        "quiet": _healthz_figures(sampler.between(*quiet)),
        "hostile": _healthz_figures(sampler.between(*hostile)),
    }
    artifact = Artifact.objects.get(pk=uploaded["id"])
    kinds = dict(
        Poll.objects.filter(
            target__deployment=good[0].deployment, ok=False,
            cycle_at__gte=datetime.fromtimestamp(hostile[0], tz=UTC),
        ).values_list("target__replica", "error_kind").distinct()
    )  # fmt: skip
    print(f"phases: {args.seconds} s each, poll interval {args.interval} s, "
          f"{args.deployments} deployments, {args.slow_clients} slow clients; "
          f"load average {os.getloadavg()[1]:.1f} (5 min) on {os.cpu_count()} CPUs")  # fmt: skip
    print(f"{'deployment':<14}{'quiet fill':>14}{'hostile fill':>16}{'ratio':>8}")
    for name in fills["quiet"]:
        q, h = fills["quiet"][name], fills["hostile"][name]
        qr, hr = q[0] / max(1, q[1]), h[0] / max(1, h[1])
        print(f"{name:<14}{f'{q[0]}/{q[1]} {qr:.0%}':>14}{f'{h[0]}/{h[1]} {hr:.0%}':>16}"
              f"{hr / qr if qr else float('nan'):>8.2f}")  # fmt: skip
    print(f"{'/healthz':<14}{'quiet':>14}{'hostile':>16}{'ratio':>8}")
    for key in ("samples", "failed", "over_1s", "p50_ms", "p99_ms", "max_ms"):
        q, h = health["quiet"][key], health["hostile"][key]
        ratio = h / q if q else float("nan")
        print(f"{key:<14}{q:>14.1f}{h:>16.1f}{ratio:>8.2f}")
    print(f"artifact: {bomb_bytes:,} bytes uploaded (expands past 4 GiB); "
          f"status {artifact.status} after {artifact.analysis_seconds or 0:.0f} s of analysis "
          f"on the artifact worker; {artifact.reason[:100]}")  # fmt: skip
    print(f"hostile targets' errors: {kinds}")
    worst = min(h[0] / max(1, h[1]) for h in fills["hostile"].values())
    print(
        f"issue 19 bar: good targets fill >= 95 % of cycles: worst {worst:.0%} "
        f"({'met' if worst >= 0.95 else 'NOT met'}); /healthz within 1 s throughout: "
        f"{health['hostile']['over_1s']:.0f} samples over or failed "
        f"({'met' if health['hostile']['over_1s'] == 0 else 'NOT met'})"
    )


def _tail(folder: Path) -> str:
    from tests.support.services import tail

    return tail(folder, "web", "worker", "artifact-worker", "beat")


if __name__ == "__main__":
    main()
