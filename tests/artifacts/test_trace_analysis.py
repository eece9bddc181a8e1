"""Trace analysis: HTA-comparable numbers on real samples, causes on simulated incidents."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest

from artifacts.chrome_trace import load_chrome_trace
from artifacts.trace_analysis import analyse_trace, parse_step_annotation
from enginesim import profiling
from enginesim.artifacts import StepRecord, write_chrome_trace
from enginesim.deployment import Deployment, SimClock
from tests.support.samples import CHROME_TRACES, samples_absent

COST = 0.035e-3  # enginesim's prefill cost per token (s)
DECODE = 0.045


def _sample(name: str):
    path = CHROME_TRACES / name
    if samples_absent(path):
        pytest.skip("shared profiler samples are not available")
    return analyse_trace(load_chrome_trace(path)).as_dict()


def _scenario(name: str, steps: int = 400) -> dict:
    d = Deployment(name, clock=SimClock("manual"), seed=0)
    d.advance(180)
    eng = d.replicas[0].engine
    body = profiling.chrome_trace(eng, profiling.step_records(eng, eng.step_idx - steps, steps))
    return analyse_trace(load_chrome_trace(io.BytesIO(body))).as_dict()


def _records(chunk: int, every: int = 10, n: int = 60) -> list[StepRecord]:
    out, t = [], 0.0
    for i in range(n):
        chunks = ((chunk, 0),) if i % every == 5 else ()
        dur = sum(c for c, _ in chunks) * COST + DECODE + 0.002
        out.append(StepRecord(i, t, dur, chunks, 32, 40_000, (), 0.0, i % 2 == 0))
        t += dur
    return out


def _synthetic(chunk: int) -> dict:
    body = write_chrome_trace(
        _records(chunk), tp_size=4, cost_per_prefill_token_s=COST, decode_step_s=DECODE
    )
    return analyse_trace(load_chrome_trace(io.BytesIO(body))).as_dict()


def test_4096_token_chunks_cost_about_143_ms() -> None:
    result = _synthetic(4096)
    (finding,) = result["findings"]
    assert finding["key"] == "oversized-prefill-chunks"
    v = finding["values"]
    assert v["worst_step_prefill_tokens"] == 4096
    assert v["tokens_source"] == "allreduce-estimate"
    assert v["prefill_step_excess_ms"] == pytest.approx(143.4, abs=3.0)
    assert v["excess_at_4096_tokens_ms"] == pytest.approx(143.4, abs=3.0)
    assert v["oversized_steps"] == 6
    assert v["suggested_max_num_batched_tokens"] == 512
    s = result["signals"]
    assert s["artifact_max_new_tokens_per_step"] == 4096
    assert s["artifact_prefill_step_excess_ms"] == pytest.approx(143.4, abs=3.0)
    assert s["artifact_decode_step_p50_ms"] == pytest.approx(47.0, abs=1.0)
    slow = result["slowest_steps"][0]
    assert "4,096 new tokens" in slow["explanation"]
    assert slow["composition"]["new_requests"] == 1


def test_512_token_chunks_are_not_a_finding() -> None:
    result = _synthetic(512)
    assert result["findings"] == []
    assert result["signals"]["artifact_prefill_step_excess_ms"] == pytest.approx(17.9, abs=2.0)


def test_long_prefill_itl_scenario_names_the_cause() -> None:
    result = _scenario("long-prefill-itl")
    keys = [f["key"] for f in result["findings"]]
    assert keys == ["oversized-prefill-chunks"]
    v = result["findings"][0]["values"]
    assert v["max_new_tokens_per_step"] >= 4096
    assert v["prefill_step_excess_ms"] > 143.0
    assert v["ms_per_1k_new_tokens"] == pytest.approx(35.0, rel=0.1)
    assert v["excess_at_4096_tokens_ms"] == pytest.approx(143.0, rel=0.1)
    assert result["signals"]["artifact_step_max_ms"] > 190.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["healthy", "gc-pauses"])
def test_scenarios_without_oversized_chunks_have_no_finding(name: str) -> None:
    result = _scenario(name)
    assert result["findings"] == []
    assert result["signals"]["artifact_max_new_tokens_per_step"] <= 512


def test_gc_pause_steps_are_explained_as_host_stalls() -> None:
    result = _scenario("gc-pauses")
    worst = result["slowest_steps"][0]
    assert worst["gpu_busy_fraction"] < 0.5
    assert "host-side stall" in worst["explanation"]
    assert result["idle"]["largest_gaps"][0]["gap_ms"] > 100.0


def test_prefill_unchunked_scenario_shows_the_same_signature() -> None:
    result = _scenario("prefill-unchunked")
    assert [f["key"] for f in result["findings"]] == ["oversized-prefill-chunks"]
    assert result["signals"]["artifact_max_new_tokens_per_step"] > 8000


def test_nccl_sample_matches_hta_definitions() -> None:
    r = _sample("hta_nccl_data_a100_2rank.json.gz")
    idle = r["idle"]
    total = idle["idle_ms"] + idle["compute_ms"] + idle["non_compute_ms"]
    assert total == pytest.approx(idle["kernel_time_ms"], abs=0.01)
    assert 0.0 < idle["idle_fraction"] < 1.0
    assert r["kernel_breakdown"]["by_kind"]["communication"]["count"] == 21
    assert r["kernel_breakdown"]["by_kind"]["computation"]["count"] == 2679
    by_coll = {c["collective"]: c for c in r["collectives"]["by_collective"]}
    assert by_coll["allreduce"]["count"] == 15 and by_coll["broadcast"]["count"] == 6
    assert by_coll["allreduce"]["group_size"] == 2
    assert 0.0 <= r["signals"]["artifact_comm_overlap_fraction"] <= 1.0
    assert [s["name"] for s in r["steps"]] == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    assert all(0 < s["gpu_busy_ms"] < s["dur_ms"] for s in r["steps"])
    assert r["metadata"]["world_size"] == 2
    assert r["long_cpu_ops"][0]["gpu_busy_fraction"] == 0.0


@pytest.mark.slow
def test_cuda_graph_launches_share_correlations() -> None:
    r = _sample("hta_a100_ws16_rank0.json.gz")
    g = r["graph_launches"]
    assert g["graph_launches"] == 70
    assert g["max_kernels_per_graph_launch"] == 8
    assert g["kernels_from_graphs"] == 135  # README: 70 launches -> 135 kernels
    assert 0 < r["signals"]["artifact_graph_launch_fraction"] < 1


def test_engine_annotations_on_real_traces() -> None:
    prefill = _sample("tracelens_mi300_sglang_qwen3-8b_prefill.json.gz")
    (step,) = prefill["steps"]  # the TraceLens span wraps SGLang's own step annotation
    assert step["composition"]["prefill_tokens"] == 15360
    assert step["kind"] == "prefill"
    decode = _sample("tracelens_mi300_sglang_qwen3-8b_decode.json.gz")
    assert decode["steps"][0]["kind"] == "decode"
    assert decode["graph_launches"]["graph_launches"] == 1
    replay = _sample("tracelens_mi300_vllm_decode_full_graph_replay.json.gz")
    assert replay["steps"][0]["composition"]["decode_requests"] == 32
    assert replay["graph_launches"]["max_kernels_per_graph_launch"] >= 400


def test_parse_step_annotation_forms() -> None:
    assert parse_step_annotation("execute_new_2_cached_30") == {
        "engine": "vllm",
        "new_requests": 2,
        "cached_requests": 30,
        "tokens": None,
        "prefill_tokens": None,
        "decode_requests": None,
        "tokens_source": None,
    }
    sg = parse_step_annotation("step[EXTEND bs=15 toks=15360]")
    assert sg and sg["prefill_tokens"] == 15360 and sg["prefill_requests"] == 15
    assert parse_step_annotation("step[DECODE bs=32]")["decode_requests"] == 32  # type: ignore[index]
    tl = parse_step_annotation(
        "execute_8192_context_9(sq8155sk8430sqsq1sqsk1)_generation_37(sq37sk34489sqsq37sqsk1)"
    )
    assert tl and tl["prefill_tokens"] == 8155 and tl["decode_requests"] == 37
    assert parse_step_annotation("ProfilerStep#3") is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "hta_cpu_only_rank34.pt.trace.json.gz",
        "kineto_tbplugin_resnet50_2021.pt.trace.json.gz",
        "tracelens_h100_qwen1.5-0.5b_inference.json.gz",
        "tracelens_mi300_vllm_piecewise_graph_capture.pt.trace.json.gz",
        "hta_mi250_rocm.json.gz",
    ],
)
def test_as_dict_is_strict_json(name: str) -> None:
    r = _sample(name)
    assert r["kind"] == "chrome-trace"
    for key in ("events", "steps", "kernel_breakdown", "idle", "collectives", "graph_launches",
                "slowest_steps", "findings", "signals"):  # fmt: skip
        assert key in r
    json.dumps(r, allow_nan=False)
    assert all(isinstance(v, (int, float)) for v in r["signals"].values())


def test_a_gc_pause_in_a_prefill_step_is_not_prefill_work() -> None:
    """The prefill excess is GPU work: a 150 ms host stall (a GC pause, an empty gap before
    the forward) in a step that carries a 512-token chunk adds wall time, not GPU time,
    and does not read as an oversized chunk."""
    records, t = [], 0.0
    for r in _records(512):
        pause = 0.15 if r.index == 25 else 0.0  # a prefill-bearing step (every 10th from 5)
        records.append(replace(r, start_s=t, duration_s=r.duration_s + pause, gc_pause_s=pause))
        t += r.duration_s + pause
    body = write_chrome_trace(
        records, tp_size=4, cost_per_prefill_token_s=COST, decode_step_s=DECODE
    )
    result = analyse_trace(load_chrome_trace(io.BytesIO(body))).as_dict()
    assert result["signals"]["artifact_step_max_ms"] > 150 + DECODE * 1000
    assert result["signals"]["artifact_prefill_step_excess_ms"] == pytest.approx(17.9, abs=2.0)
