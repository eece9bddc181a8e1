"""Same seed + same simulated time => byte-identical endpoint output, however time was advanced."""

from __future__ import annotations

import pytest

PATHS = ["/metrics", "/dcgm/metrics", "/router/metrics", "/logs?offset=0", "/profiler/gc_log",
         "/replicas/1/metrics"]  # fmt: skip


def _collect(h):
    return {p: h.get(p) for p in PATHS}


@pytest.mark.parametrize("scenario", ["kv-pressure", "graph-pool-growth", "tp-straggler"])
def test_same_seed_same_bytes(harness, scenario):
    a = harness(scenario, replicas=2, seed=7)
    b = harness(scenario, replicas=2, seed=7)
    a.advance(300)
    for _ in range(30):  # same simulated time reached in many small steps
        b.advance(10)
    # Interleave reads (which advance replicas lazily) to prove reads do not perturb state.
    b.get("/replicas/1/metrics")
    assert _collect(a) == _collect(b)
    ta, tb = a.get("/profiler/trace?steps=5&mode=last"), b.get("/profiler/trace?steps=5&mode=last")
    assert ta == tb
    sa = a.get("/profiler/memory_snapshot?rank=1")
    assert sa == b.get("/profiler/memory_snapshot?rank=1")


def test_different_seed_differs(harness):
    a = harness("healthy", seed=1)
    b = harness("healthy", seed=2)
    a.advance(60)
    b.advance(60)
    assert a.get("/metrics") != b.get("/metrics")


def test_replica_streams_do_not_depend_on_replica_count(harness):
    a = harness("healthy", replicas=1, seed=3)
    b = harness("healthy", replicas=4, seed=3)
    a.advance(60)
    b.advance(60)
    assert a.get("/metrics") == b.get("/replicas/0/metrics")


def test_mirrored_replicas_keep_their_own_identity(harness):
    h = harness("healthy", replicas=6, simulated=2, seed=4)
    h.advance(30)
    sc1 = h.scrape("/replicas/1/metrics")
    sc3 = h.scrape("/replicas/3/metrics")  # mirrors engine 1 (3 % 2)
    assert {ls["engine"] for ls, _ in sc3.samples["vllm:num_requests_running"]} == {"3"}
    assert sc1.value("vllm:generation_tokens_total") == sc3.value("vllm:generation_tokens_total")
    u1 = {
        ls["UUID"] for ls, _ in h.scrape("/replicas/1/dcgm/metrics").samples["DCGM_FI_DEV_GPU_UTIL"]
    }
    d3 = h.scrape("/replicas/3/dcgm/metrics").samples["DCGM_FI_DEV_GPU_UTIL"]
    assert {ls["Hostname"] for ls, _ in d3} == {"atlas-node-003"}
    assert not u1 & {ls["UUID"] for ls, _ in d3}
    truth = __import__("json").loads(h.get("/control/truth"))
    assert truth["replicas"] == 6 and truth["simulated_engines"] == 2
