"""`python -m enginesim` as an operator runs it."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_list():
    out = subprocess.run(
        [sys.executable, "-m", "enginesim", "--list"], cwd=ROOT, capture_output=True, text=True,
        check=True, timeout=60,
    )  # fmt: skip
    lines = out.stdout.strip().splitlines()
    names = [ln.split()[0] for ln in lines]
    for name in ("healthy", "kv-pressure", "router-slow", "prefill-unchunked", "graph-pool-growth",
                 "kv-block-leak", "long-prefill-itl", "gc-pauses", "tp-straggler"):  # fmt: skip
        assert name in names
    assert all(len(ln.split(None, 1)) == 2 for ln in lines)  # one line each, with a summary


def test_serve_subprocess():
    proc = subprocess.Popen(
        [sys.executable, "-m", "enginesim", "--scenario", "kv-pressure", "--port", "0",
         "--speed", "10", "--replicas", "2"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"'main': (\d+)", line)
        assert m, line
        port = int(m.group(1))
        for path in ("/metrics", "/replicas/1/metrics", "/dcgm/metrics", "/router/metrics",
                     "/logs?offset=0", "/health", "/control/truth"):  # fmt: skip
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                assert r.status == 200, path
                r.read()
            finally:
                conn.close()
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stdout is not None:
            proc.stdout.close()
    assert proc.returncode in (0, -15)


def test_bad_scenario_exit_code():
    out = subprocess.run(
        [sys.executable, "-m", "enginesim", "--scenario", "nope", "--port", "0"], cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "unknown scenario" in out.stderr
