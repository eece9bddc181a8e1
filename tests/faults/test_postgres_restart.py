"""PostgreSQL restarted (``pg_ctl restart -m fast``: every connection cut) while gunicorn, a
Celery worker and beat run against it: the web answers and the worker stores new cycles
again with nobody touching them.

The database is a private cluster (tests/support/services.py), migrated and seeded by the
product's own ``manage.py`` in a subprocess; this test reads it back with plain psycopg.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import psycopg

from tests.support.hostile import hostile_server
from tests.support.services import (
    ROOT,
    celery_beat_args,
    celery_worker_args,
    free_port,
    gunicorn_args,
    http_get,
    product_env,
    product_process,
    tail,
    wait_for_http,
    wait_until,
)

LOGS = ("web", "worker", "beat")
SEED = """
import json, os
from django.test import Client
from django.contrib.auth import get_user_model
from investigations import actions
from probes.models import TargetKind
from teams.models import Membership, Role, Team
from tests.support import builders

team = Team.objects.create(name="Atlas serving")
user = get_user_model().objects.create_user(username="cora", password="x" * 20)
Membership.objects.create(team=team, user=user, role=Role.COMMANDER)
deployment = builders.deployment(team, "atlas-pg-fault", poll_interval_s=2)
builders.target(deployment, TargetKind.ENGINE, os.environ["FAULT_ENGINE_URL"])
investigation = actions.open_investigation(
    deployment=deployment, symptom="high-ttft", user=user
)
client = Client()
client.force_login(user)
print(json.dumps({"investigation": str(investigation.pk),
                  "session": client.cookies["sessionid"].value}))
"""


def _manage(environment: dict[str, str], *args: str, timeout: float = 240) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True,
        text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _count(url: str, sql: str, *params) -> int:
    with psycopg.connect(url, connect_timeout=3) as conn:
        return conn.execute(sql, params).fetchone()[0]


def test_web_and_worker_reconnect_after_postgres_restarts(
    private_postgres, private_redis, tmp_path
):
    database = private_postgres.create_database("atlas_pg_fault")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with hostile_server() as engine:
        environment = product_env(
            database_url=database,
            broker_url=private_redis.url,
            data_dir=tmp_path,
            extra={"ATLAS_HEARTBEAT_SECONDS": "1", "FAULT_ENGINE_URL": engine + "/metrics"},
        )
        _manage(environment, "migrate", "--no-input", "-v0")
        seeded = json.loads(_manage(environment, "shell", "-c", SEED).strip().splitlines()[-1])
        cookie = f"sessionid={seeded['session']}"
        page = f"{base}/investigations/{seeded['investigation']}/"
        with (
            product_process("web", gunicorn_args(port, workers=1), environment, tmp_path),
            product_process("worker", celery_worker_args(), environment, tmp_path),
            product_process("beat", celery_beat_args(tmp_path), environment, tmp_path),
        ):
            assert wait_for_http(base), tail(tmp_path, *LOGS)
            assert http_get(page, cookie)[0] == 200
            assert wait_until(
                lambda: _count(database, "SELECT count(*) FROM probes_poll") >= 3, 60
            ), tail(tmp_path, *LOGS)
            # The worker and beat now hold persistent connections (CONN_MAX_AGE); the web
            # server (gevent) connects per request ...
            assert all(http_get(page, cookie)[0] == 200 for _ in range(8))

            private_postgres.restart()  # ... and this cuts every connection
            restarted_at = datetime.now(UTC)

            # Once PostgreSQL accepts connections again, no request fails: each stale
            # connection is health-checked and replaced before it is used.
            answers = [http_get(page, cookie)[0] for _ in range(8)]
            answers += [http_get(base + "/healthz")[0] for _ in range(4)]
            assert answers == [200] * 12, answers
            resumed = wait_until(
                lambda: _count(
                    database, "SELECT count(*) FROM probes_poll WHERE recorded_at > %s",
                    restarted_at,
                ) >= 3,
                60,
            )  # fmt: skip
            assert resumed, tail(tmp_path, *LOGS)
    # Each successful poll has exactly its scrape's two series: nothing half-written by a
    # task whose connection died, nothing written twice by its retry.
    uneven = _count(
        database,
        "SELECT count(*) FROM probes_poll p WHERE p.ok AND 2 <> (SELECT count(*) FROM "
        "probes_observation o WHERE o.target_id = p.target_id AND o.taken_at = p.cycle_at "
        "AND o.signal IN ('kv_cache_usage', 'requests_waiting'))",
    )
    assert uneven == 0
