"""``./atlas demo`` says "up" only when the web server answers, and keeps earlier logs.

Run for real: the script starts the simulator, a worker, beat and gunicorn. The web port is
held by a socket that never answers, so gunicorn cannot bind and exits; the script must
say so and exit non-zero instead of printing the URL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.services import free_port

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_demo_fails_loudly_when_the_web_server_never_answers(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    (data / "logs").mkdir(parents=True)
    earlier = data / "logs" / "web.log"
    earlier.write_text("a line from the run before\n")
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    web_port = squatter.getsockname()[1]
    env = {
        **os.environ,
        "ATLAS_DATA_DIR": str(data),
        "ATLAS_PORT": str(web_port),
        "ATLAS_SIM_PORT": str(free_port()),
        "ATLAS_DRILL_SIM_PORT": str(free_port()),
        "ATLAS_STATIC_MANIFEST": "0",  # no 30 CPU-s compression for a test of start-up
    }
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen(
        ["./atlas", "demo"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        squatter.close()
    assert proc.returncode == 1, (out, err)
    assert "Atlas Console is up" not in out
    assert "did not answer" in err
    log = earlier.read_text()
    assert log.startswith("a line from the run before\n")  # appended, not truncated
    assert "=== atlas demo started" in log
