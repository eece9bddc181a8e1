"""The guard-removal mutants still fit the code (issue 19).

``.ci/guard-mutants`` answers whether every limit and refusal of the pickle loader, the
bounded readers and the network guard is killed by a test when it is removed; its list
(``.ci/guard_mutants.py``) names each guard by its exact source text. A guard rewritten
without its mutant would drop out of that answer unnoticed until the next run: here the list
is checked against the code on every test run (each text occurs exactly once, each mutated
module compiles, each hint names a test of the module's runner list). Running the mutants
themselves is the runner's job.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_guard_mutant_still_applies_to_the_code():
    checked = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "guard-mutants"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "mutants apply cleanly" in checked.stdout
