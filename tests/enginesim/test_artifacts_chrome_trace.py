"""Simulated Kineto traces must look like real exports and encode the Atlas cost model."""

from __future__ import annotations

import gzip
import itertools
import json
from collections import Counter

import pytest

from enginesim.artifacts import (
    StepRecord,
    kineto_base_time_ns,
    render_chrome_trace,
    write_chrome_trace,
)
from tests.support.complexity import calls
from tests.support.samples import CHROME_TRACES, samples_absent

COST = 0.035e-3
DECODE = 0.045
TRACES = CHROME_TRACES
KW = {"tp_size": 4, "cost_per_prefill_token_s": COST, "decode_step_s": DECODE}


def step(
    index: int,
    start: float,
    *,
    chunks: tuple[tuple[int, int], ...] = (),
    decode: int = 32,
    slowdown: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0),
    gc: float = 0.0,
    graph: bool = False,
    duration: float | None = None,
) -> StepRecord:
    work = sum(n for n, _ in chunks) * COST + (DECODE if decode else 0.0)
    if duration is None:
        duration = gc + work * max(slowdown) + 0.002
    return StepRecord(index, start, duration, chunks, decode, 40_000, slowdown, gc, graph)


def mixed_steps(n: int) -> list[StepRecord]:
    out, t = [], 0.0
    for i in range(n):
        chunks = ((4096, 0),) if i % 50 == 0 else (((512, 1024),) if i % 3 == 0 else ())
        s = step(i, t, chunks=chunks, gc=0.02 if i % 100 == 7 else 0.0, graph=i % 2 == 0)
        out.append(s)
        t += s.duration_s
    return out


def events(trace: dict, cat: str, name: str | None = None) -> list[dict]:
    return [
        e
        for e in trace["traceEvents"]
        if e.get("cat") == cat and (name is None or e["name"] == name)
    ]


def compute_kernels(trace: dict) -> list[dict]:
    return [e for e in events(trace, "kernel") if not e["name"].startswith("nccl")]


def test_loads_with_json_and_gzip_and_is_deterministic() -> None:
    steps = mixed_steps(20)
    raw = write_chrome_trace(steps, **KW)
    packed = write_chrome_trace(steps, gzip=True, **KW)
    assert json.loads(raw) == json.loads(gzip.decompress(packed))
    assert raw == write_chrome_trace(steps, **KW)
    assert packed == write_chrome_trace(steps, gzip=True, **KW)


def test_top_level_matches_kineto() -> None:
    trace = render_chrome_trace(mixed_steps(5), rank=2, **KW)
    keys = list(trace)
    assert keys[0] == "schemaVersion" and keys[-1] == "traceName"
    assert keys.index("baseTimeNanoseconds") < keys.index("traceEvents")
    assert trace["distributedInfo"]["rank"] == 2
    assert trace["distributedInfo"]["world_size"] == 4
    assert len(trace["deviceProperties"]) == 4
    base = trace["baseTimeNanoseconds"]
    assert base % (7_889_238 * 10**9) == 0
    assert base == kineto_base_time_ns(1770925809.0)
    assert all(isinstance(e["ts"], float) for e in events(trace, "kernel"))


def _shape(trace: dict) -> dict[tuple, set]:
    """Event key sets per (ph, cat), ignoring Kineto's optional per-event args."""
    shapes: dict[tuple, set] = {}
    for e in trace["traceEvents"]:
        shapes.setdefault((e["ph"], e.get("cat")), set()).add(frozenset(e))
    return shapes


@pytest.mark.parametrize(
    "sample",
    ["tracelens_h100_qwen1.5-0.5b_inference.json.gz", "hta_nccl_data_a100_2rank.json.gz"],
)
def test_event_shapes_match_real_samples(sample: str) -> None:
    path = TRACES / sample
    if samples_absent(path):
        pytest.skip("shared profiler samples are not available")
    real = json.loads(gzip.decompress(path.read_bytes()))
    ours = render_chrome_trace(mixed_steps(10), **KW)
    assert set(ours["deviceProperties"][0]) == set(real["deviceProperties"][0])
    if "distributedInfo" in real:
        assert set(real["distributedInfo"]) == set(ours["distributedInfo"])
        assert set(real["distributedInfo"]["pg_config"][0]) == set(
            ours["distributedInfo"]["pg_config"][0]
        )
    real_shapes, our_shapes = _shape(real), _shape(ours)
    for key, our_sets in our_shapes.items():
        if key in real_shapes:
            assert our_sets <= real_shapes[key], key
    real_kernel_args = set().union(*(e["args"] for e in events(real, "kernel")))
    # Optional Kineto args: CUDA-graph node ids, and collective args on linked NCCL kernels.
    extra = {"graph id", "graph node id", "External id"}
    nccl_args = {"Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                 "In split size", "Out split size", "Process Group Name",
                 "Process Group Description", "Process Group Ranks"}  # fmt: skip
    for kernel in events(ours, "kernel"):
        allowed = real_kernel_args | extra | (nccl_args if "nccl" in kernel["name"] else set())
        assert set(kernel["args"]) <= allowed
        assert isinstance(kernel["args"]["grid"], list) and len(kernel["args"]["grid"]) == 3
    for key in ("cuda_runtime", "cpu_op", "user_annotation", "gpu_user_annotation"):
        real_args = {frozenset(e["args"]) for e in events(real, key)}
        if real_args:
            for e in events(ours, key):
                assert any(set(e["args"]) <= r for r in real_args), (key, e["args"])


def test_trace_is_internally_consistent() -> None:
    trace = render_chrome_trace(mixed_steps(60), **KW)
    steps = {e["name"]: e for e in events(trace, "user_annotation") if e["name"].startswith("Prof")}
    assert len(steps) == 60
    runtime = events(trace, "cuda_runtime")
    corr = [e["args"]["correlation"] for e in runtime]
    assert len(corr) == len(set(corr))
    by_corr = {e["args"]["correlation"]: e for e in runtime}
    windows = sorted((s["ts"], s["ts"] + s["dur"]) for s in steps.values())
    gpu = events(trace, "kernel") + events(trace, "gpu_memcpy")
    for k in gpu:
        launch = by_corr[k["args"]["correlation"]]
        assert k["ts"] >= launch["ts"]  # the GPU runs what the CPU already launched
        if k["cat"] == "kernel":  # (the blocking D2H copy overlaps its cudaMemcpyAsync)
            assert k["ts"] >= launch["ts"] + launch["dur"] - 0.002
        assert k["args"]["External id"] == launch["args"]["External id"]
        owner = [w for w in windows if w[0] <= launch["ts"] < w[1]]
        assert len(owner) == 1
        assert k["ts"] + k["dur"] <= owner[0][1] + 0.002  # and ends inside its step
    flows = Counter((e["ph"], e["id"]) for e in trace["traceEvents"] if e.get("cat") == "ac2g")
    assert {i for ph, i in flows if ph == "s"} == set(corr)
    assert sum(n for (ph, _), n in flows.items() if ph == "f") == len(gpu)
    for stream_events in (gpu, events(trace, "gpu_user_annotation")):
        assert all(e["pid"] == 0 and e["tid"] == 7 for e in stream_events)
    ordered = sorted(gpu, key=lambda e: e["ts"])
    for a, b in itertools.pairwise(ordered):
        assert a["ts"] + a["dur"] <= b["ts"] + 0.002  # one stream: no overlap


def test_prefill_kernel_time_follows_cost_model() -> None:
    # Walkthrough 3: a 4096-token chunk costs 4096 * 0.035 ms = 143 ms of prefill compute.
    trace = render_chrome_trace([step(0, 0.0, chunks=((4096, 0),), decode=0)], **KW)
    prefill_ms = sum(k["dur"] for k in compute_kernels(trace)) / 1e3
    assert prefill_ms == pytest.approx(4096 * 0.035, rel=0.002)
    mixed = render_chrome_trace([step(0, 0.0, chunks=((512, 1024),), decode=40)], **KW)
    mixed_ms = sum(k["dur"] for k in compute_kernels(mixed)) / 1e3
    assert mixed_ms == pytest.approx(512 * 0.035 + 45.0, rel=0.002)
    attention = [k for k in compute_kernels(trace) if k["name"].startswith("void flash::")]
    assert len(attention) == 1 and attention[0]["args"]["grid"][0] == 32


def test_straggler_stretches_nccl_wait() -> None:
    even = step(0, 0.0, chunks=((1024, 0),), decode=16)
    slow = step(0, 0.0, chunks=((1024, 0),), decode=16, slowdown=(1.0, 1.0, 1.0, 1.5))

    def nccl_ms(record: StepRecord, rank: int) -> float:
        (kernel,) = events(render_chrome_trace([record], rank=rank, **KW), "kernel")[-1:]
        assert kernel["name"].startswith("ncclDevKernel_AllReduce_Sum_bf16")
        assert kernel["args"]["Group size"] == 4
        return kernel["dur"] / 1e3

    compute_ms = (1024 * COST + DECODE) * 1e3
    assert nccl_ms(slow, 0) - nccl_ms(even, 0) == pytest.approx(0.5 * compute_ms, rel=0.01)
    assert nccl_ms(slow, 3) == pytest.approx(nccl_ms(even, 3), abs=0.01)
    straggler = render_chrome_trace([slow], rank=3, **KW)
    assert sum(k["dur"] for k in compute_kernels(straggler)) / 1e3 == pytest.approx(
        1.5 * compute_ms, rel=0.002
    )


def test_gc_pause_is_an_empty_cpu_and_gpu_gap() -> None:
    record = step(5, 1.0, decode=32, gc=0.03)
    trace = render_chrome_trace([record], **KW)
    (window,) = [e for e in events(trace, "user_annotation") if e["name"] == "ProfilerStep#5"]
    busy = [
        (e["ts"], e["ts"] + e["dur"])
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e.get("cat") not in ("Trace",) and e is not window
    ]
    edges = sorted(busy)
    gaps, cursor = [], window["ts"]
    for start, end in edges:
        gaps.append(start - cursor)
        cursor = max(cursor, end)
    assert max(gaps) >= 30_000.0  # microseconds
    without = render_chrome_trace([step(5, 1.0, decode=32)], **KW)
    first = min(e["ts"] for e in events(without, "cpu_op"))
    assert first - window["ts"] < 1_000.0


def test_execute_annotation_follows_vllm_worker() -> None:
    # vLLM: execute_new_{len(scheduled_new_reqs)}_cached_{len(scheduled_cached_reqs)}
    record = step(3, 0.0, chunks=((4096, 0), (512, 1024)), decode=10)
    names = [e["name"] for e in events(render_chrome_trace([record], **KW), "user_annotation")]
    assert names == ["ProfilerStep#3", "execute_new_1_cached_11"]
    forced = StepRecord(3, 0.0, 0.3, ((4096, 128),), 0, 0, (), 0.0, False, new_requests=1)
    names = [e["name"] for e in events(render_chrome_trace([forced], **KW), "user_annotation")]
    assert names[1] == "execute_new_1_cached_0"


def test_cuda_graph_replays_share_a_correlation() -> None:
    decode_only = render_chrome_trace([step(0, 0.0, decode=64, graph=True)], **KW)
    (launch,) = events(decode_only, "cuda_runtime", "cudaGraphLaunch")
    kernels = events(decode_only, "kernel")
    assert {k["args"]["correlation"] for k in kernels} == {launch["args"]["correlation"]}
    assert [k["args"]["graph node id"] for k in kernels] == list(range(1, len(kernels) + 1))
    mixed = render_chrome_trace([step(0, 0.0, chunks=((384, 0),), decode=17, graph=True)], **KW)
    assert len(events(mixed, "cuda_runtime", "cudaGraphLaunch")) == 2
    eager = events(mixed, "cuda_runtime", "cudaLaunchKernel")
    assert len(eager) == 2  # piecewise: attention runs outside the graphs


def test_overlong_work_is_compressed_into_the_step() -> None:
    record = step(0, 0.0, chunks=((4096, 0),), decode=0, duration=0.05)
    trace = render_chrome_trace([record], **KW)
    (window,) = [e for e in events(trace, "user_annotation") if e["name"].startswith("Prof")]
    assert max(k["ts"] + k["dur"] for k in events(trace, "kernel")) <= window["ts"] + 50_000.0


def test_rendering_grows_linearly_with_the_steps() -> None:
    """Counted in function calls, not seconds (timing: bench/enginesim_artifacts.py)."""
    few, _ = calls(render_chrome_trace, mixed_steps(500), **KW)
    many, trace = calls(render_chrome_trace, mixed_steps(2000), **KW)
    assert len(events(trace, "user_annotation")) == 4000
    assert many / few < 4 * 1.1, (few, many)  # quadratic work would be 16 times
