"""A real Celery worker process consumes a real task from a real broker and writes to the
test database: the path every probe takes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from kombu import Connection

from atlas_console import env
from probes.models import WorkerHeartbeat
from probes.tasks import record_heartbeat
from tests.conftest import require_service

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("ATLAS_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _redis_url() -> str:
    url = settings.CELERY_BROKER_URL if not settings.ATLAS_EMBEDDED_BROKER else REDIS_URL
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or 6379), timeout=2).close()
    except OSError as exc:
        require_service("Redis", f"{parts.hostname}:{parts.port or 6379}: {exc}")
    return url


def _database_url() -> str:
    """The URL of the test database pytest-django created, for the worker process."""
    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{conf['NAME']}"
    user = conf.get("USER") or "postgres"
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    host = conf.get("HOST") or "127.0.0.1"
    return f"postgres://{user}{password}@{host}:{conf.get('PORT') or 5432}/{conf['NAME']}"


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(params=["embedded", "redis"])
def broker(request, tmp_path):
    """(url, transport options, extra worker env) for each broker the product supports."""
    if request.param == "embedded":
        config = env.broker_config("", tmp_path, visibility_timeout=3600)
        return config.url, config.transport_options, {"ATLAS_DATA_DIR": str(tmp_path)}
    url = _redis_url()
    config = env.broker_config(url, tmp_path, visibility_timeout=3600)
    return url, config.transport_options, {"CELERY_BROKER_URL": url}


@pytest.fixture
def worker(broker, transactional_db, tmp_path):
    if connection.vendor == "sqlite" and ":memory:" in str(connection.settings_dict["NAME"]):
        pytest.fail("the SQLite test database must be a file so that a worker can share it")
    url, options, extra_env = broker
    queue = f"atlas-test-{uuid.uuid4().hex[:8]}"
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "DATABASE_URL"))
    }
    environment.update({"DATABASE_URL": _database_url(), "ATLAS_DATA_DIR": str(tmp_path)})
    environment.update(extra_env)
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "atlas_console", "worker",
            "--queues", queue, "--concurrency", "1", "--loglevel", "INFO",
            "--hostname", f"{queue}@%h", "--without-gossip", "--without-mingle",
        ],
        cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield url, options, queue, process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


def test_a_worker_processes_a_task_through_the_real_broker(worker, tmp_path):
    url, options, queue, process = worker
    tick = uuid.uuid4()
    with Connection(url, transport_options=options) as conn:
        record_heartbeat.apply_async(
            kwargs={"tick": str(tick), "sent_at": timezone.now().isoformat()},
            queue=queue,
            connection=conn,
        )
    arrived = _wait_for(lambda: WorkerHeartbeat.objects.filter(tick=tick).exists(), 60)
    log = (tmp_path / "worker.log").read_text()
    assert arrived, f"no heartbeat within 60 s; worker exit={process.poll()}\n{log[-3000:]}"
    beat = WorkerHeartbeat.objects.get(tick=tick)
    assert beat.hostname.startswith(queue)
    assert beat.queue == queue


def test_redelivering_the_same_tick_records_it_once(worker):
    url, options, queue, _ = worker
    tick = uuid.uuid4()
    with Connection(url, transport_options=options) as conn:
        for _ in range(3):
            record_heartbeat.apply_async(
                kwargs={"tick": str(tick), "sent_at": timezone.now().isoformat()},
                queue=queue,
                connection=conn,
            )
    assert _wait_for(lambda: WorkerHeartbeat.objects.filter(tick=tick).exists(), 60)
    time.sleep(2)  # give the duplicates time to be consumed too
    assert WorkerHeartbeat.objects.filter(tick=tick).count() == 1


def test_tasks_enqueued_inside_a_transaction_wait_for_the_commit(
    django_capture_on_commit_callbacks, db, monkeypatch
):
    # Records the publish instead of sending it: what matters here is *when* it happens.
    published = []
    monkeypatch.setattr(record_heartbeat, "apply_async", lambda *a, **kw: published.append(kw))
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        record_heartbeat.delay_on_commit(tick=str(uuid.uuid4()))
        assert published == []
    assert len(callbacks) == 1
    assert len(published) == 1


def test_celery_is_configured_for_at_least_once_delivery():
    from atlas_console.celery import app

    conf = app.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_serializer == "json" and conf.accept_content == ["json"]
    assert conf.result_backend is None and conf.task_ignore_result
    assert conf.task_soft_time_limit < conf.task_time_limit
    if not settings.ATLAS_EMBEDDED_BROKER:
        assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit
