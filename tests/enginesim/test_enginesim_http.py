"""The non-metrics endpoints over real HTTP: logs with offsets, profiler artifacts, control."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import socket
import threading

import pytest


class _NoGlobals(pickle.Unpickler):
    """Snapshots must be pure data: refuse any class or function reference."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} not allowed")


def test_health_version_load_index(harness):
    h = harness("healthy", replicas=2)
    h.advance(30)
    assert h.request("GET", "/health")[0] == 200
    assert json.loads(h.get("/version")) == {"version": "0.33.0"}
    assert json.loads(h.get("/replicas/1/load"))["server_load"] >= 0
    idx = json.loads(h.get("/"))
    assert idx["replicas"] == 2 and "/metrics" in idx["endpoints"]
    assert h.request("GET", "/replicas/9/metrics")[0] == 404
    assert h.request("GET", "/nope")[0] == 404
    assert h.request("GET", "/server_info")[0] == 404  # vLLM serves it only in dev mode
    assert h.request("DELETE", "/metrics")[0] == 405


def test_logs_offsets_and_formats(harness, tmp_path):
    h = harness("healthy")
    st, headers, first = h.request("GET", "/logs?offset=0")
    assert st == 200
    text = first.decode()
    assert "Chunked prefill is enabled with max_num_batched_tokens=512." in text
    assert "GPU KV cache size: 114,688 tokens" in text
    assert "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)" in text
    assert "Graph capturing finished in" in text
    assert text.startswith("(APIServer pid=1) INFO 01-05 08:00:00 [api_server.py:")
    nxt = int(headers["x-log-next-offset"])
    assert nxt == len(first)
    h.advance(30)
    st, headers2, more = h.request("GET", f"/logs?offset={nxt}")
    assert b"Engine 000: Avg prompt throughput:" in more
    assert int(headers2["x-log-next-offset"]) == nxt + len(more)
    # Reading from the end returns nothing new.
    st, _, empty = h.request("GET", f"/logs?offset={headers2['x-log-next-offset']}")
    assert empty == b""
    assert h.request("GET", "/logs?offset=abc")[0] == 400


def test_log_file(tmp_path):
    from enginesim.deployment import Deployment, SimClock

    path = tmp_path / "engine.log"
    d = Deployment("healthy", clock=SimClock("manual"), log_file=str(path))
    d.advance(20)
    assert path.read_bytes() == d.engines[0].log.read(0)[0]


def test_profiler_trace_last_and_next(harness):
    h = harness("long-prefill-itl")
    h.advance(60)
    trace = json.loads(h.get("/profiler/trace?steps=8&mode=last"))
    names = {e.get("name", "") for e in trace["traceEvents"]}
    assert any(n.startswith("ProfilerStep#") for n in names)
    gz = h.get("/profiler/trace?steps=3&mode=last&gzip=1")
    assert json.loads(gzip.decompress(gz))["traceEvents"]
    # mode=next waits for steps that have not happened yet; a concurrent advance provides them.
    out = {}

    def fetch():
        out["resp"] = h.request("GET", "/profiler/trace?steps=4&mode=next&timeout=20")

    t = threading.Thread(target=fetch)
    t.start()
    import time

    time.sleep(0.3)
    h.advance(5)
    t.join(30)
    st, _, body = out["resp"]
    assert st == 200
    steps = [e for e in json.loads(body)["traceEvents"]
             if e.get("name", "").startswith("ProfilerStep#")]  # fmt: skip
    assert len(steps) >= 4


def test_memory_snapshot_is_pure_data(harness):
    h = harness("graph-pool-growth")
    h.advance(120)
    snap = _NoGlobals(io.BytesIO(h.get("/profiler/memory_snapshot?rank=0"))).load()
    assert {"segments", "device_traces"} <= set(snap)
    pools = {tuple(s["segment_pool_id"]) for s in snap["segments"]}
    assert any(p != (0, 0) for p in pools)  # CUDA-graph private pools
    assert h.request("GET", "/profiler/memory_snapshot?rank=9")[0] == 400


def test_gc_log(harness):
    h = harness("gc-pauses")
    h.advance(30)
    text = h.get("/profiler/gc_log").decode()
    assert "gc: collecting generation 2" in text
    assert "gc: done," in text


def test_control_fix_validation_and_truth(harness):
    h = harness("kv-pressure", replicas=2)
    h.advance(10)
    assert h.post_json("/control/fix", {"max_num_seqs": "x"})[0] == 400
    assert h.post_json("/control/fix", {"bogus": 1})[0] == 400
    assert h.post_json("/control/fix", [])[0] == 400
    assert h.request("POST", "/control/fix", b"{not json")[0] == 400
    assert h.request("GET", "/control/fix")[0] == 405
    st, out = h.post_json("/replicas/1/control/fix", {"max_num_seqs": 28})
    assert st == 200 and out["results"][0]["applied"] == {"max_num_seqs": 28}
    truth = json.loads(h.get("/control/truth"))
    assert truth["primary_cause"] == "kv-cache-pressure"
    assert truth["engines"][1]["config"]["max_num_seqs"] == 28
    assert truth["engines"][0]["config"]["max_num_seqs"] == 40
    assert truth["fix_applied"] is True
    st, out = h.post_json("/control/fix", {"enforce_eager": True, "downtime_s": 2})
    assert st == 200 and out["results"][0]["restarted"] is True
    assert h.request("GET", "/health")[0] == 503  # restarting
    assert h.request("GET", "/metrics")[0] == 503
    h.advance(3)
    assert h.request("GET", "/health")[0] == 200


def test_advance_requires_manual_clock(harness):
    from enginesim.deployment import SimClock

    h = harness("healthy", clock=SimClock("realtime", 50.0))
    assert h.request("POST", "/control/advance?seconds=5", b"")[0] == 409
    assert json.loads(h.get("/control/truth"))["sim_time_s"] > 0


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", 413),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431),
        (b"garbage\r\n\r\n", 400),
    ],
)
def test_bounded_requests(harness, raw, status):
    h = harness("healthy")
    with socket.create_connection(("127.0.0.1", h.port), timeout=10) as s:
        s.sendall(raw)
        data = s.recv(200)
    assert data.startswith(f"HTTP/1.1 {status}".encode())


def test_keep_alive(harness):
    import http.client

    h = harness("healthy")
    conn = http.client.HTTPConnection("127.0.0.1", h.port, timeout=10)
    try:
        for _ in range(3):
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            assert r.status == 200 and r.read()
    finally:
        conn.close()
