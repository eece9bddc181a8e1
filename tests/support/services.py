"""Private Redis and PostgreSQL servers, and the product's own processes, for fault tests.

Fault tests stop and restart services; the machine's shared PostgreSQL and Redis belong to
everyone else, so each test gets servers of its own on free ports under a temporary folder,
always stopped and removed afterwards. Every start and stop is bounded in time.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.support.processes import spawn_logged

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate: Callable[[], bool], timeout: float, step: float = 0.2) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; never raises."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return True
        time.sleep(step)
    return False


def _stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


# --- Redis --------------------------------------------------------------------------------


@dataclass
class RedisServer:
    """``redis-server`` without persistence: a restart loses every queued message, which is
    the harshest broker outage a worker can see."""

    port: int
    folder: Path
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> None:
        # The binary first: a missing one skips before any file is opened.
        binary = _binary("redis-server", "Redis")
        self.process = spawn_logged(
            [
                binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.folder),
            ],
            self.folder / "redis.log", append=True,
        )  # fmt: skip
        if not wait_until(self.ping, START_TIMEOUT_S, 0.05):
            self.stop()
            pytest.fail(f"private redis-server on {self.port} did not answer PING")

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            self.process = None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@pytest.fixture
def private_redis(tmp_path_factory) -> Iterator[RedisServer]:
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- PostgreSQL ---------------------------------------------------------------------------


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    require_service("PostgreSQL server binaries", f"{name} not found (apt-get install postgresql)")
    raise AssertionError("unreachable")


@dataclass
class PostgresCluster:
    """A throw-away cluster: ``initdb`` into a temporary folder, trust auth, socket in the
    same folder, no fsync. PostgreSQL refuses to run as root, so under root it runs as
    the ``postgres`` system user."""

    port: int
    folder: Path
    user: str | None = None
    databases: list[str] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = START_TIMEOUT_S) -> None:
        result = subprocess.run(
            list(args), user=self.user, capture_output=True, text=True, timeout=timeout,
            check=False, cwd=self.folder,
        )  # fmt: skip
        if result.returncode != 0:
            log = (self.folder / "postgres.log").read_text()[-2000:] if self.log.exists() else ""
            pytest.fail(f"{' '.join(args[:2])} failed: {result.stderr[-2000:]}\n{log}")

    @property
    def log(self) -> Path:
        return self.folder / "postgres.log"

    def initdb(self) -> None:
        self._run(
            _pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--no-sync", "--no-instructions", timeout=120,
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            _pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-t", str(START_TIMEOUT_S), "-o", options, "start",
        )  # fmt: skip

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every client connection is cut, as in a failover."""
        self._run(
            _pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w",
            "-t", str(START_TIMEOUT_S), "restart",
        )  # fmt: skip

    def stop(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                [_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                 "-t", str(STOP_TIMEOUT_S), "stop"],
                user=self.user, capture_output=True, timeout=STOP_TIMEOUT_S + 5, check=False,
            )  # fmt: skip

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return self.url(name)


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PostgresCluster]:
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            require_service("PostgreSQL", "running as root and no 'postgres' user to run it as")
        user = "postgres"
    folder = Path(tempfile.mkdtemp(prefix="atlas-faults-pg-"))
    if user:
        entry = pwd.getpwnam(user)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    cluster = PostgresCluster(free_port(), folder, user)
    try:
        cluster.initdb()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _binary(name: str, service: str) -> str:
    found = shutil.which(name)
    if not found:
        require_service(service, f"{name} is not installed")
    return found  # type: ignore[return-value]


# --- The product's processes --------------------------------------------------------------


def product_env(
    *, database_url: str, broker_url: str, data_dir: Path, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a web/worker/beat process pointed at these services only."""
    from django.conf import settings

    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CELERY_", "DATABASE_URL", "ATLAS_", "PYTEST", "DJANGO_"))
    }
    environment.update(
        {
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": broker_url,
            "ATLAS_DATA_DIR": str(data_dir),
            # One key for the test process and its servers, so a test's session cookie works.
            "ATLAS_SECRET_KEY": settings.SECRET_KEY
            if len(settings.SECRET_KEY) >= 50
            else "faults-" + "k" * 60,
        }
    )
    environment.update(extra or {})
    return environment


@contextlib.contextmanager
def product_process(
    name: str,
    args: list[str],
    environment: dict[str, str],
    folder: Path,
    *,
    priority: int = 0,
) -> Iterator[subprocess.Popen]:
    """Run ``python -m <args>`` from the repository root, logging to ``folder/<name>.log``;
    SIGTERM (then SIGKILL) at exit.

    ``priority`` raises the process that many nice levels above everything else where that
    is allowed (root): for tests whose claim is about the product's timing on its own cycle
    grid, which a machine busy with other work would otherwise decide."""
    command = [sys.executable, "-m", *args]
    if priority > 0 and os.geteuid() == 0 and shutil.which("nice"):
        command = ["nice", "-n", str(-priority), *command]  # nice execs: same pid
    process = spawn_logged(
        command, folder / f"{name}.log", append=True,
        cwd=ROOT, env=environment, start_new_session=True,
    )  # fmt: skip
    try:
        yield process
    finally:
        _stop(process)


def celery_worker_args(concurrency: int = 2) -> list[str]:
    """The polling worker as deployed (queue "atlas"; deploy/Procfile)."""
    return [
        "celery", "-A", "atlas_console", "worker", "--queues", "atlas", "--loglevel", "INFO",
        "--concurrency", str(concurrency), "--without-gossip", "--without-mingle",
        "--hostname", f"faults-{os.getpid()}-{free_port()}@%h",
    ]  # fmt: skip


def celery_artifact_worker_args() -> list[str]:
    """The artifact worker as deployed (queue "artifacts", one analysis at a time, a fresh
    child per analysis; deploy/Procfile)."""
    return [
        "celery", "-A", "atlas_console", "worker", "--queues", "artifacts", "--loglevel", "INFO",
        "--concurrency", "1", "--max-tasks-per-child", "1", "--without-gossip",
        "--without-mingle", "--hostname", f"faults-artifacts-{os.getpid()}-{free_port()}@%h",
    ]  # fmt: skip


def celery_beat_args(folder: Path) -> list[str]:
    return [
        "celery", "-A", "atlas_console", "beat", "--loglevel", "INFO",
        "--schedule", str(folder / "celerybeat-schedule"),
    ]  # fmt: skip


def gunicorn_args(port: int, workers: int = 2) -> list[str]:
    """The shipped web server (deploy/gunicorn.conf.py: gevent workers), on ``port``."""
    return [
        "gunicorn", "-c", "deploy/gunicorn.conf.py", "atlas_console.wsgi",
        "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
    ]  # fmt: skip


def http_get(url: str, cookie: str = "", timeout: float = 10) -> tuple[int, str]:
    """(status, body) of a GET; an HTTP error status is returned, not raised."""
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


def wait_for_http(base: str, timeout: float = START_TIMEOUT_S) -> bool:
    return wait_until(lambda: http_get(base + "/healthz", timeout=2)[0] == 200, timeout)


def tail(folder: Path, *names: str, chars: int = 3000) -> str:
    """The end of each process log, for assertion messages."""
    parts = []
    for name in names:
        path = folder / f"{name}.log"
        if path.exists():
            parts.append(f"--- {name}.log ---\n{path.read_text(errors='replace')[-chars:]}")
    return "\n".join(parts)
