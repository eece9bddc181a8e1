"""A real Prometheus server (Debian package ``prometheus``) scraping test endpoints."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import require_service
from tests.support.processes import spawn_logged

BINARY = shutil.which("prometheus") or "/usr/bin/prometheus"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(base: str, expr: str) -> list:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
        out = json.loads(response.read())
    if out.get("status") != "success":
        raise OSError(f"query failed: {out}")
    return out["data"]["result"]


@contextmanager
def prometheus(
    tmp_path: Path, target: str, jobs: Sequence[tuple[str, str]], *, interval: str = "1s"
) -> Iterator[str]:
    """Scrape ``target`` (host:port) at each (job, path); yield the server's base URL."""
    if not os.access(BINARY, os.X_OK):
        require_service("Prometheus", "binary missing (Debian package `prometheus`)")
    lines = ["global:", f"  scrape_interval: {interval}", "  scrape_timeout: 1s"]
    lines.append("scrape_configs:")
    for job, path in jobs:
        lines += [
            f"  - job_name: {job}",
            f"    metrics_path: {path}",
            "    static_configs:",
            f"      - targets: ['{target}']",
        ]
    config = tmp_path / "prometheus.yml"
    config.write_text("\n".join(lines) + "\n")
    port = _free_port()
    process = spawn_logged(
        [BINARY, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        tmp_path / "prometheus.log",
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_series(base: str, expr: str, timeout: float = 40.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = query(base, expr)
        except OSError:
            result = []
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"Prometheus had no answer for {expr!r} within {timeout:g} s")
