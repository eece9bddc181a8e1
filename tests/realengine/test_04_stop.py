"""Stopping by process group leaves nothing behind (runs last: it needs an engine of its own)."""

from __future__ import annotations

import subprocess

from realengine import EngineFlags, EngineServer
from tests.realengine.conftest import record


def test_stop_leaves_no_process_behind(engines, tmp_path):
    server = EngineServer(
        engines.install, engines.model, EngineFlags(max_num_seqs=4), tmp_path / "short.log"
    )
    engines.stop()  # one engine at a time on two cores
    server.start()
    try:
        record("cold_start_s.stop_test", round(server.wait_healthy(), 1))
        pgid = server.process.pid
        children = subprocess.run(
            ["pgrep", "-g", str(pgid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert len(children) >= 2  # the API server and its engine-core process
    finally:
        server.stop()
    assert not server.group_alive()
    assert subprocess.run(["pgrep", "-g", str(pgid)], check=False).returncode == 1
    assert (tmp_path / "short.log").stat().st_size > 0
