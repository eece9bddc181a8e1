"""The probes' asyncio fetches under the web server's gevent worker (deploy/gunicorn.conf.py).

Under gevent every request is a greenlet of one OS thread. An event loop run there by one
request (a discovery form, "read it from a running engine", a drill's start) is "running"
for every other request while it waits on a socket: a second fetch's ``asyncio.run``
raised "cannot be called from a running event loop", and Django refused the other requests'
queries as async-unsafe. The script below is run in its own interpreter, patched by gevent
as gunicorn's worker patches itself, against a real dribbling server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gevent")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
from gevent import monkey

monkey.patch_all()

import json, os, sys
import django

os.environ["DJANGO_SETTINGS_MODULE"] = "atlas_console.settings"
django.setup()

import gevent
from django.db import connection

from probes.collect import fetch_all
from probes.net import FetchPolicy, parse_networks
from tests.support.hostile import hostile_server

policy = FetchPolicy(
    allowed_networks=parse_networks(["127.0.0.0/8"]),
    connect_timeout=2, read_timeout=2, total_timeout=3, max_bytes=1 << 20,
)
out = {"queries": 0, "errors": []}

with hostile_server() as base:
    def fetch(path):
        try:
            (got,) = fetch_all([("k", base + path)], policy)
            return got.error.kind if got.error else "ok"
        except Exception as exc:  # the answer is what happened, whatever it was
            out["errors"].append(f"fetch {path}: {type(exc).__name__}: {exc}")
            return "raised"

    def queries():
        for _ in range(20):
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
                out["queries"] += 1
            except Exception as exc:
                out["errors"].append(f"query: {type(exc).__name__}: {exc}")
            gevent.sleep(0.05)

    slow = gevent.spawn(fetch, "/slow")  # dribbles a byte each 0.5 s: held to its deadline
    gevent.sleep(0.2)
    fast = gevent.spawn(fetch, "/metrics")  # a second fetch while the first loop waits
    reader = gevent.spawn(queries)  # another request's ORM work meanwhile
    gevent.joinall([slow, fast, reader], timeout=60)
    out["slow"], out["fast"] = slow.value, fast.value
print(json.dumps(out))
"""


def test_concurrent_fetches_and_queries_under_gevent(tmp_path):
    env = {**os.environ, "ATLAS_DATA_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)  # the script's own SQLite file: no shared state
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["errors"] == []
    assert out["slow"] == "timeout"
    assert out["fast"] == "ok"
    assert out["queries"] == 20
