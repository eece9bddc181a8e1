"""Stopping by process group leaves nothing behind (runs last, on whatever engine the
earlier tests left running: a start of its own would cost two more minutes)."""

from __future__ import annotations

import subprocess

from realengine import EngineFlags


def test_stop_leaves_no_process_behind(engines):
    server = engines.serve_matching(lambda flags: True, EngineFlags(max_num_seqs=4))
    pgid = server.process.pid
    children = subprocess.run(
        ["pgrep", "-g", str(pgid)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert len(children) >= 2  # the API server and its engine-core process
    engines.stop()
    assert not server.group_alive()
    assert subprocess.run(["pgrep", "-g", str(pgid)], check=False).returncode == 1
    assert server.log_path.stat().st_size > 0
