"""The worked example in docs/extending.md stays true: the patch that adds a probe kind
still applies to this tree and touches only the registry, its parser, its migration and
its tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PATCH = REPO / "docs" / "examples" / "probe-kind-exporter.patch"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_probe_kind_example_applies_and_touches_only_its_own_files() -> None:
    def git_apply(*args: str) -> str:
        done = subprocess.run(
            ["git", "apply", *args, str(PATCH)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    git_apply("--check")
    touched = {line.split("\t")[-1] for line in git_apply("--numstat").splitlines()}
    assert touched == {
        "probes/kinds.py",
        "probes/parsing/exporter.py",
        "probes/migrations/0007_exporter_kind.py",
        "tests/probes/test_exporter_kind.py",
    }
