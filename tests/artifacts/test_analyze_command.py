"""``manage.py analyze_artifact``: every real sample is analysed or precisely rejected,
in-process, with no database writes; a rejection exits 2 with one line."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.samples import CHROME_TRACES, MEMORY_SNAPSHOTS, REPO, samples_absent

pytestmark = pytest.mark.skipif(samples_absent(), reason="shared samples not present")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "analyze_artifact", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _samples() -> list[Path]:
    if samples_absent():
        return []
    return sorted(MEMORY_SNAPSHOTS.iterdir()) + sorted(CHROME_TRACES.iterdir())


@pytest.mark.slow
def test_every_profiler_sample_is_analysed_or_rejected_precisely():
    """One process for all files (the command's own code path, via call_command)."""
    from io import StringIO

    from django.core.management import call_command

    seen = {}
    for path in _samples():
        out = StringIO()
        try:
            call_command("analyze_artifact", str(path), "--json", stdout=out)
        except SystemExit as exc:
            seen[path.name] = ("rejected", exc.code)
            continue
        analysis = json.loads(out.getvalue())
        seen[path.name] = (analysis["kind"], analysis)
    assert seen["hta_memory_timeline.raw.gz"][0] == "rejected"
    analysed = {k: v for k, v in seen.items() if v[0] != "rejected"}
    assert len(analysed) == len(seen) - 1
    snapshot = analysed["mlsys_profile_grad.pkl"][1]
    assert snapshot["kind"] == "memory-snapshot"
    assert snapshot["reserved_bytes"] == 4_439_670_784
    assert snapshot["graph_pool_bytes"] == 0
    assert "steps" in snapshot and "findings" in snapshot
    trace = analysed["hta_nccl_data_a100_2rank.json.gz"][1]
    assert trace["kind"] == "chrome-trace"
    assert [s["name"] for s in trace["steps"]] == [f"ProfilerStep#{n}" for n in (4, 5, 6)]


def test_a_rejected_file_exits_2_with_one_line(tmp_path):
    hostile = tmp_path / "snapshot.pickle"
    hostile.write_bytes(pickle.dumps(print, protocol=4))  # a GLOBAL: never executed
    result = _run(str(hostile))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rejected: ") and "opcode" in lines[0]
    assert result.stdout == ""


def test_the_memory_timeline_export_is_named_as_what_it_is():
    result = _run(str(CHROME_TRACES / "hta_memory_timeline.raw.gz"), "--json")
    assert result.returncode == 2
    assert "memory" in result.stderr.lower()


def test_json_for_a_real_snapshot_carries_the_final_state(tmp_path):
    result = _run(str(MEMORY_SNAPSHOTS / "mlsys_profile_grad.pkl"), "--json")
    assert result.returncode == 0, result.stderr
    analysis = json.loads(result.stdout)
    assert (analysis["reserved_bytes"], analysis["allocated_bytes"]) == (
        4_439_670_784,
        3_233_754_432,
    )
    assert all(name.startswith("artifact_") for name in analysis["signals"])


def test_no_database_is_touched(tmp_path):
    """The command works with a database URL that cannot be reached."""
    import os

    env = {**os.environ, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
    result = subprocess.run(
        [sys.executable, "manage.py", "analyze_artifact",
         str(MEMORY_SNAPSHOTS / "voxelflex_dump_snapshot_no_history.pickle")],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "memory-snapshot" in result.stdout


def test_the_human_output_reads_in_units_and_json_keeps_raw_numbers():
    from io import StringIO

    from django.core.management import call_command

    snapshot = str(MEMORY_SNAPSHOTS / "mlsys_profile_grad.pkl")
    human, raw = StringIO(), StringIO()
    call_command("analyze_artifact", snapshot, stdout=human)
    call_command("analyze_artifact", snapshot, "--json", stdout=raw)
    rows = dict(line.split(None, 1) for line in human.getvalue().splitlines()[1:] if "  " in line)
    assert rows["artifact_reserved_bytes"].strip() == "4.13 GiB"  # 4,439,670,784 bytes
    assert "e+" not in human.getvalue()
    assert json.loads(raw.getvalue())["signals"]["artifact_reserved_bytes"] == 4_439_670_784


@pytest.mark.parametrize("make", ["directory", "fifo"])
def test_a_path_that_is_not_a_regular_file_is_rejected_without_blocking(tmp_path, make):
    import os

    path = tmp_path / "artifact"
    if make == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    result = _run(str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == "rejected: not a regular file (a directory, a FIFO or a device)"
