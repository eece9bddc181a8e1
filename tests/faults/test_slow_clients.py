"""Slowloris against the real web server commands (issue 19.4).

Clients that send a request head a byte a second used to hold every gunicorn slot: 8 of them
stalled /healthz ~95 s against the demo's 2 workers x 4 threads, 3 against compose's 3 sync
workers. The commands here are read from ``./atlas`` (cmd_demo) and docker-compose.yml, so
the test runs what they run (deploy/gunicorn.conf.py), only on a free loopback port.

The claim is availability, not speed: while the slow connections are open and dribbling,
/healthz answers 200 at all, within a wait far shorter than the old stall.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.support.processes import spawn_logged
from tests.support.services import free_port, http_get, wait_for_http

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ANSWER_WAIT_S = 30.0  # the old stall was ~95 s; a served /healthz takes well under 1 s


def demo_web_command(port: int, logs: Path) -> list[str]:
    """The gunicorn line of ``./atlas`` cmd_demo, with its variables filled in."""
    script = (ROOT / "atlas").read_text()
    match = re.search(r"^\s*(gunicorn .*?)>>", script.replace("\\\n", " "), re.MULTILINE)
    assert match, "./atlas has no gunicorn line"
    line = match.group(1).replace("$host:$port", f"127.0.0.1:{port}")
    line = line.replace("$logs", str(logs))
    assert "$" not in line, line
    return shlex.split(line)


def compose_web_command(port: int) -> tuple[list[str], dict[str, str]]:
    """docker-compose.yml's web command and the environment it adds for the web server."""
    web = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["web"]
    command = [f"127.0.0.1:{port}" if arg == "0.0.0.0:8000" else arg for arg in web["command"]]
    assert f"127.0.0.1:{port}" in command, command
    extra = {k: str(v) for k, v in web["environment"].items() if k.startswith("ATLAS_WEB_")}
    return command, extra


@contextmanager
def web_server(command: list[str], tmp_path: Path, extra: dict[str, str]) -> Iterator[None]:
    assert command[0] == "gunicorn", command
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "DATABASE_URL"))
    }
    data = tmp_path / "data"
    data.mkdir()
    environment.update({"ATLAS_DATA_DIR": str(data), **extra})
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v0"],
        cwd=ROOT, env=environment, check=True, timeout=300,
    )  # fmt: skip
    process = spawn_logged(
        [sys.executable, "-m", *command], tmp_path / "web.log",
        cwd=ROOT, env=environment, start_new_session=True,
    )  # fmt: skip
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextmanager
def slow_clients(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that each send a partial request head, then a byte a second;
    one the server drops is opened again at once, as a slowloris tool does (the server may
    bound a head's read time, which alone does not keep it available)."""
    sockets: list[socket.socket] = []
    stop = threading.Event()

    def connect() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        return sock

    def drip() -> None:
        while not stop.wait(1.0):
            for index, sock in enumerate(sockets):
                try:
                    sock.send(b"a")
                except OSError:
                    sock.close()
                    with contextlib.suppress(OSError):
                        sockets[index] = connect()

    try:
        for _ in range(count):
            # Spaced out, so that every worker process's accept loop takes its share.
            sockets.append(connect())
            time.sleep(0.05)
        thread = threading.Thread(target=drip, daemon=True)
        thread.start()
        yield sockets
    finally:
        stop.set()
        thread.join(timeout=10)
        for sock in sockets:
            sock.close()


def healthz_answers(port: int, wait_s: float) -> int | None:
    """The first status /healthz answers within ``wait_s`` (retrying errors), else None."""
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            return http_get(f"http://127.0.0.1:{port}/healthz", timeout=left)[0]
        except OSError:
            time.sleep(0.2)
    return None


def assert_survives(port: int, slots: int, tmp_path: Path) -> None:
    count = 4 * slots  # every slot the old server had, four times over
    with slow_clients(port, count):
        # Long enough for every slow connection to have been accepted and committed to a
        # worker slot (gthread defers a silent connection only for its first 5 s).
        time.sleep(8)
        status = healthz_answers(port, ANSWER_WAIT_S)
    log = (tmp_path / "web.log").read_text(errors="replace")[-3000:]
    assert status == 200, f"/healthz gave {status} with {count} slow clients open\n{log}"


def test_the_demo_web_server_answers_healthz_while_slow_clients_hold_connections(tmp_path):
    port = free_port()
    with web_server(demo_web_command(port, tmp_path), tmp_path, {}):
        assert wait_for_http(f"http://127.0.0.1:{port}"), (tmp_path / "web.log").read_text()
        # The demo used to serve 2 workers x 4 threads.
        assert_survives(port, 8, tmp_path)


def test_the_compose_web_server_answers_healthz_while_slow_clients_hold_connections(tmp_path):
    port = free_port()
    command, extra = compose_web_command(port)
    with web_server(command, tmp_path, extra):
        assert wait_for_http(f"http://127.0.0.1:{port}"), (tmp_path / "web.log").read_text()
        # Compose used to serve 3 sync workers.
        assert_survives(port, 3, tmp_path)
