"""test_api_text on a real PostgreSQL: NUL is refused by PostgreSQL alone, so the NUL half
of issue 19.5 only shows there. A private cluster (tests/support/services.py) and the
same tests in a subprocess pointed at it, as CI's PostgreSQL job runs the suite."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.services import ROOT, private_postgres  # noqa: F401 (fixture)


def test_text_safety_holds_on_postgresql(private_postgres):  # noqa: F811
    url = private_postgres.create_database("atlas_text")
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "PYTEST"))
    }
    environment["DATABASE_URL"] = url
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/investigations/test_api_text.py",
         "-q", "-p", "no:cacheprovider", "--create-db"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    tail = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, tail
    assert "3 passed" in result.stdout, tail


def test_alert_folding_and_resolution_hold_on_postgresql(private_postgres):  # noqa: F811
    """The fold locks rows (select_for_update) and matches JSON data (``data__fingerprint``):
    both are the database's own work, so they run on PostgreSQL too."""
    url = private_postgres.create_database("atlas_folding")
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "PYTEST"))
    }
    environment["DATABASE_URL"] = url
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/investigations/test_api.py", "-k",
         "folds or resolved or folded or decided", "-q", "-p", "no:cacheprovider", "--create-db"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    tail = (result.stdout + result.stderr)[-3000:]
    assert result.returncode == 0, tail
    assert "4 passed" in result.stdout, tail
