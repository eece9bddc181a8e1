"""Driving real incidents: open-loop load in the background, ``manage.py diagnose`` (the
real CLI, in its own process) against the real engine, budgets from the calibration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from loadgen.client import RunResult, run_plan
from loadgen.plan import PlannedRequest
from loadgen.report import summarize

ROOT = Path(__file__).resolve().parents[2]
DIAGNOSE_TIMEOUT_S = 300


@dataclass
class Load:
    """A plan running open-loop in a background thread (bounded by its own deadline)."""

    plan: list[PlannedRequest]
    url: str
    deadline_s: float
    seed: int = 0
    result: RunResult | None = None
    thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> Load:
        def run() -> None:
            self.result = run_plan(
                self.plan, self.url, model="tiny-llama", seed=self.seed,
                request_timeout_s=self.deadline_s, deadline_s=self.deadline_s,
            )  # fmt: skip

        self.thread = threading.Thread(target=run, name="loadgen", daemon=True)
        self.thread.start()
        return self

    def join(self) -> dict:
        assert self.thread is not None
        self.thread.join(timeout=self.deadline_s + 60)
        assert not self.thread.is_alive(), "load generator overran its deadline"
        assert self.result is not None
        report = summarize(self.result.outcomes, self.result.wall_s)
        report["errors"] = sorted({o.error or "" for o in self.result.outcomes
                                   if o.status == "error"})[:5]  # fmt: skip
        return report


def write_budget(folder: Path, name: str, constants: dict) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(constants, sort_keys=True))
    return path


def diagnose(symptom: str, metrics_url: str, budget: Path, *, cycles: int = 2,
             interval_s: float = 5.0, log_file: Path | None = None) -> dict:  # fmt: skip
    """``manage.py diagnose --json`` for ``cycles`` poll cycles (and the engine's log file,
    read from its start, where given); the parsed report."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    log = ["--log-file", str(log_file)] if log_file is not None else []
    done = subprocess.run(
        [sys.executable, "manage.py", "diagnose", "--symptom", symptom, "--engine", metrics_url,
         *log, "--deployment", str(budget), "--cycles", str(cycles), "--interval",
         str(interval_s), "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=DIAGNOSE_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def nodes(report: dict) -> dict[str, dict]:
    """Every hypothesis in the report by key."""
    out: dict[str, dict] = {}

    def walk(node: dict) -> None:
        out[node["key"]] = node
        for child in node["children"]:
            walk(child)

    for node in report["hypotheses"]:
        walk(node)
    return out


def evidence(node: dict) -> dict[str, dict]:
    return {c["check"]: c for c in node["evidence"]}


def describe(report: dict) -> str:
    """A readable dump for assertion messages (what the product saw)."""
    lines = [f"alarm {report['alarm']} ranking {report['ranking']} root {report['root_cause']}"]
    for key, node in nodes(report).items():
        checks = ", ".join(f"{c['check']}={c['measured']}:{c['outcome']}" for c in node["evidence"])
        lines.append(f"  {key}: {node['suggestion']} ({checks})")
    return "\n".join(lines)
