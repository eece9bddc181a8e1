"""The test bed runs the engine's session behind the load and the observers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from realengine.priority import (
    descendants,
    lower_session_group,
    process_children,
    process_tree,
)

# A stand-in for vLLM's process shape: a parent (the API server) whose child (the engine
# core) has a child of its own (the worker), in a session of their own.
TREE = """
import subprocess, sys, time
if sys.argv[1] in ("api", "core"):
    nxt = {"api": "core", "core": "worker"}[sys.argv[1]]
    subprocess.Popen([sys.executable, "-c", sys.argv[2], nxt, sys.argv[2]])
time.sleep(60)
"""
AUTOGROUP = Path("/proc/self/autogroup").exists()


def test_descendants_walks_the_whole_tree_below_the_root():
    children = {1: [2, 3], 2: [4], 4: [5], 9: [10]}
    assert sorted(descendants(1, children)) == [2, 3, 4, 5]
    assert descendants(5, children) == []


def test_a_command_with_spaces_and_parentheses_is_read_right(tmp_path: Path):
    for pid, stat in {"100": "100 (a) b) S 1 100", "101": "101 (VLLM::Worker x) S 100 1"}.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(stat)
    (tmp_path / "self").mkdir()  # not a pid: skipped
    (tmp_path / "102").mkdir()  # vanished mid-read (no stat): skipped
    assert process_children(tmp_path) == {1: [100], 100: [101]}
    assert process_tree(100, tmp_path) == [100, 101]


@pytest.mark.skipif(not AUTOGROUP, reason="the kernel has no autogroup scheduling")
def test_the_engine_session_is_lowered_as_a_group_and_this_one_is_not():
    api = subprocess.Popen([sys.executable, "-c", TREE, "api", TREE], stdout=subprocess.DEVNULL,
                           start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while len(process_tree(api.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        tree = process_tree(api.pid)
        assert len(tree) == 3, tree
        assert lower_session_group(api.pid, 7)
        # One group for the whole session (the engine core and worker too), at 7; the
        # threads themselves keep their niceness, and this process's group is untouched.
        groups = {Path(f"/proc/{pid}/autogroup").read_text().strip() for pid in tree}
        assert len(groups) == 1 and groups.pop().endswith("nice 7")
        assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in tree} == {0}
        assert not Path("/proc/self/autogroup").read_text().strip().endswith("nice 7")
    finally:
        for pid in reversed(process_tree(api.pid)):
            os.kill(pid, 9)
        api.wait()


def test_no_autogroup_leaves_the_engine_as_started(tmp_path: Path):
    assert lower_session_group(os.getpid(), 5, proc=tmp_path / "absent") is False
