"""Real Celery worker processes for tests: the broker the product uses, the test database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection

from atlas_console import env
from tests.conftest import require_service
from tests.support.processes import spawn_logged

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("ATLAS_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def redis_url() -> str:
    url = settings.CELERY_BROKER_URL if not settings.ATLAS_EMBEDDED_BROKER else REDIS_URL
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or 6379), timeout=2).close()
    except OSError as exc:
        require_service("Redis", f"{parts.hostname}:{parts.port or 6379}: {exc}")
    return url


def database_url() -> str:
    """The URL of the test database pytest-django created, for the worker process."""
    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        if ":memory:" in str(conf["NAME"]):
            pytest.fail("the SQLite test database must be a file so that a worker can share it")
        return f"sqlite:///{conf['NAME']}"
    user = conf.get("USER") or "postgres"
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    host = conf.get("HOST") or "127.0.0.1"
    return f"postgres://{user}{password}@{host}:{conf.get('PORT') or 5432}/{conf['NAME']}"


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def broker_for(kind: str, tmp_path: Path) -> tuple[str, dict, dict[str, str]]:
    """(url, transport options, worker env) for "embedded" or "redis"."""
    if kind == "embedded":
        config = env.broker_config("", tmp_path, visibility_timeout=3600)
        return config.url, config.transport_options, {"ATLAS_DATA_DIR": str(tmp_path)}
    url = redis_url()
    config = env.broker_config(url, tmp_path, visibility_timeout=3600)
    return url, config.transport_options, {"CELERY_BROKER_URL": url}


@contextmanager
def celery_worker(
    worker_env: dict[str, str], tmp_path: Path, *, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start ``celery worker`` on a fresh queue against the test database; yield the queue."""
    queue = f"atlas-test-{uuid.uuid4().hex[:8]}"
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "DATABASE_URL"))
    }
    environment.update({"DATABASE_URL": database_url(), "ATLAS_DATA_DIR": str(tmp_path)})
    environment.update(worker_env)
    environment.update(extra_env or {})
    process = spawn_logged(
        [
            sys.executable, "-m", "celery", "-A", "atlas_console", "worker",
            "--queues", queue, "--concurrency", "1", "--loglevel", "INFO",
            "--hostname", f"{queue}@%h", "--without-gossip", "--without-mingle",
        ],
        tmp_path / "worker.log", cwd=ROOT, env=environment,
    )  # fmt: skip
    try:
        yield queue, process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
