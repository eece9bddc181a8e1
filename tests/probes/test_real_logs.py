"""Real engine logs as users posted them (../shared/samples/real/*_logs, sidecar beside
each file): what the parser reads from each, event by event and value by value, and what
the log probe makes of it (observations, zero counts only from clean recognised reads)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from artifacts.gc_log import analyse_gc_log, parse_gc_text
from probes import observe
from probes.parsing.logevents import UNRECOGNISED, FollowerState, LogFollower, parse_log
from tests.support.samples import SAMPLES, samples_absent

REAL = SAMPLES / "real"
LOG_FOLDERS = ("vllm_logs", "sglang_logs", "gc_logs")
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

pytestmark = pytest.mark.skipif(samples_absent(REAL), reason="shared real samples absent")


def _read(name: str) -> bytes:
    folder = "gc_logs" if name.startswith(("cpython", "vllm_0.24_gc")) else None
    folder = folder or ("sglang_logs" if name.startswith("sglang") else "vllm_logs")
    return (REAL / folder / name).read_bytes()


def _events(name: str):
    return parse_log(_read(name), NOW)


def _kinds(events) -> Counter:
    return Counter(e.kind for e in events)


def _of(events, kind: str) -> list[dict]:
    return [dict(e.values) for e in events if e.kind == kind]


def _observed(name: str) -> dict[tuple[str, str], float]:
    _, seen = observe.observe_log(FollowerState(), _read(name), NOW)
    return {(signal, labels): value for signal, labels, value in seen.observations}


# -- vLLM V0 -----------------------------------------------------------------------------


def test_v0_042_kv_full_pending_stats_lines_without_trailing_period():
    events = _events("v0_0.4.2_h800_kv_full_pending.log")
    stats = _of(events, "stats")
    assert _kinds(events) == {"stats": 5}
    assert [s["kv_cache_usage_pct"] for s in stats] == [99.7, 99.6, 99.7, 99.9, 100.0]
    assert [s["waiting"] for s in stats] == [740, 746, 754, 761, 768]  # "Pending"
    assert [s["running"] for s in stats] == [247, 241, 233, 226, 219]
    assert all(s["shape"] == "v0" and s["prompt_throughput"] == 0 for s in stats)
    seen = _observed("v0_0.4.2_h800_kv_full_pending.log")
    # The last stats line is the engine's state now, as a gauge scrape would give it.
    assert seen[("kv_cache_usage", "")] == pytest.approx(1.0)
    assert seen[("requests_waiting", "")] == 768 and seen[("requests_running", "")] == 219
    assert seen[("log_events", "kind=cuda_oom")] == 0  # clean, recognised: zero is evidence
    # V0 warns on every 50th preemption only: no warning is no evidence of no preemption.
    assert ("preemptions_rate", "") not in seen


def test_v0_preemption_warning_then_failed_execution():
    events = _events("v0_0.6.3dev_preemption_then_crash.log")
    assert _kinds(events) == {"preemption": 1, "engine_died": 1}
    assert _of(events, "preemption") == [{"mode": "RECOMPUTE", "cumulative": 1}]
    assert _of(events, "engine_died")[0]["reason"] == "Writing input of failed execution"
    seen = _observed("v0_0.6.3dev_preemption_then_crash.log")
    assert seen[("preemptions_rate", "")] > 0
    # The engine failed of a cause the excerpt does not show: no OOM count, not zero.
    assert seen[("log_events", f"kind={UNRECOGNISED}")] == 1
    assert ("log_events", "kind=cuda_oom") not in seen


def test_v0_priority_preemption_warning_among_debug_lines():
    events = _events("v0_0.6.3dev_preemption_warning_priority.log")
    assert _kinds(events) == {"preemption": 1}
    (event,) = events
    assert event.level == "WARNING" and event.timestamp == datetime(2026, 10, 10, 20, 41, 4)
    assert dict(event.values) == {"mode": "RECOMPUTE", "cumulative": 1}


def test_v0_bare_pasted_preemption_warning():
    events = _events("v0_preemption_warning_bare.log")
    assert _of(events, "preemption") == [{"mode": "RECOMPUTE", "cumulative": 101}]
    seen = _observed("v0_preemption_warning_bare.log")
    assert seen[("preemptions_rate", "")] > 0
    # One bare line is not a recognised engine log: no zero counts from it.
    assert ("log_events", "kind=cuda_oom") not in seen


def test_v0_capture_with_tqdm_bar_is_a_start_up_capture():
    events = _events("v0_0.6.5_cuda_graph_capture_tqdm.log")
    assert _kinds(events) == {"cuda_graph_capture_started": 1, "cuda_graph_capture_finished": 1}
    finished = _of(events, "cuda_graph_capture_finished")[0]
    assert finished == {"seconds": 14, "gib": 0.21, "encoder": False, "after_warmup": False}
    seen = _observed("v0_0.6.5_cuda_graph_capture_tqdm.log")
    # Warm-up never ended in this excerpt: "no capture after warm-up" is not known yet.
    assert ("log_events", "kind=cuda_graph_capture_after_warmup") not in seen


def test_v0_idle_stats_with_trailing_period_and_access_lines():
    events = _events("v0_0.6.x_l40_stats_idleish.log")
    assert _kinds(events) == {"stats": 3}
    assert {s["kv_cache_usage_pct"] for s in _of(events, "stats")} == {20.0}
    seen = _observed("v0_0.6.x_l40_stats_idleish.log")
    assert seen[("kv_cache_usage", "")] == pytest.approx(0.2)
    assert seen[("requests_waiting", "")] == 0 and seen[("requests_running", "")] == 1


def test_v0_085_bracketed_stats_and_prefix_cache_line():
    events = _events("v0_0.8.5_cpu_prefix_cache_stats.log")
    assert _kinds(events) == {"stats": 1}
    stats = _of(events, "stats")[0]
    assert stats["kv_cache_usage_pct"] == 0.1 and stats["prompt_throughput"] == 13.2


# -- vLLM V1 -----------------------------------------------------------------------------


def test_v1_glued_stats_lines_are_cut_apart_never_merged():
    events = _events("v1_0.10.0_stats_kv91_glued_lines.log")
    stats = _of(events, "stats")
    assert len(stats) == 4  # 2 physical lines, 4 records
    assert [s.get("kv_cache_usage_pct") for s in stats] == [91.2, 91.6, 91.9, None]
    assert [e.timestamp.second for e in events] == [59, 9, 19, 29]
    assert stats[3] == {  # cut by the excerpt mid-value: what is there, nothing invented
        "shape": "v1", "engine": 0, "prompt_throughput": 0.0, "generation_throughput": 240.8
    }  # fmt: skip
    seen = _observed("v1_0.10.0_stats_kv91_glued_lines.log")
    assert seen[("kv_cache_usage", "")] == pytest.approx(0.919)  # last complete value
    assert seen[("requests_running", "")] == 8


def test_v1_offline_stats_line_without_preemption_field():
    events = _events("v1_0.10.x_bench_throughput_stats_preempting.log")
    (stats,) = _of(events, "stats")
    assert stats["running"] == 259 and stats["waiting"] == 535
    assert stats["kv_cache_usage_pct"] == 82.3 and "preemptions" not in stats
    seen = _observed("v1_0.10.x_bench_throughput_stats_preempting.log")
    # This V1 line never prints preemptions: their absence says nothing.
    assert ("preemptions_rate", "") not in seen


def test_v1_markdown_bulleted_startup_paste():
    events = _events("v1_0.11.0_nv25.11_startup_bulleted_paste.log")
    assert _kinds(events) == {"server_start": 1, "chunked_prefill": 1}
    start = next(e for e in events if e.kind == "server_start")
    assert start.process == "APIServer" and start.values["version"] == "0.11.0+582e4e37.nv25.11"
    assert _of(events, "chunked_prefill") == [{"max_num_batched_tokens": 2048}]
    # The budget every step of this engine stays within, for itl-spikes' veto.
    assert (
        _observed("v1_0.11.0_nv25.11_startup_bulleted_paste.log")[("log_chunk_budget_tokens", "")]
        == 2048
    )


def test_v1_container_stamped_and_hard_wrapped_stats_are_joined():
    events = _events("v1_0.11_docker_ts_wrapped_kv_leak_near100.log")
    stats = _of(events, "stats")
    assert [s["kv_cache_usage_pct"] for s in stats] == [88.5, 89.8, 93.2]
    assert [s["generation_throughput"] for s in stats] == [843.6, 852.1, 794.7]
    assert [s["running"] for s in stats] == [38, 38, 39]
    first = next(e for e in events if e.kind == "stats")
    # The runtime's stamp is kept, and it gives vLLM's month-day its year.
    assert first.received_at == datetime(2025, 10, 15, 0, 2, 38, 756689, tzinfo=UTC)
    assert first.timestamp == datetime(2025, 10, 14, 17, 2, 38)
    assert first.process == "APIServer"


def test_v1_apiserver_stats_prefill_bound_queue():
    events = _events("v1_2026_apiserver_stats_waiting_prefill_bound.log")
    stats = _of(events, "stats")
    assert [s["waiting"] for s in stats] == [90, 84, 78, 72, 66]
    assert [s["kv_cache_usage_pct"] for s in stats] == [19.3, 30.9, 42.5, 54.2, 65.4]
    assert all(s["prompt_throughput"] > 23_990 for s in stats)


def test_v1_mtp_kv_bound_stats():
    stats = _of(_events("v1_2026_mtp_kv96_waiting43.log"), "stats")
    assert max(s["kv_cache_usage_pct"] for s in stats) == 98.4
    assert [s["waiting"] for s in stats] == [43, 42, 33, 23, 23]


def test_v1_startup_kv_budget_lines():
    events = _events("v1_2026_startup_kv_budget_lines.log")
    assert _kinds(events) == {"kv_cache_memory": 1, "kv_cache_tokens": 1, "max_concurrency": 1}
    assert _of(events, "kv_cache_memory") == [{"gib": 17.36}]
    assert _of(events, "kv_cache_tokens") == [{"tokens": 188640}]
    assert _of(events, "max_concurrency") == [{"tokens_per_request": 131072, "factor": 5.23}]
    assert all(e.process == "EngineCore_DP0" for e in events)


def test_v1_capture_bars_of_every_mode_are_one_start_up_capture():
    events = _events("v1_2026_windows_capture_tqdm_modes_prefill.log")
    assert _kinds(events) == {
        "cuda_graph_capture_started": 1, "cuda_graph_capture_finished": 1, "kv_cache_memory": 1
    }  # fmt: skip
    finished = _of(events, "cuda_graph_capture_finished")[0]
    assert finished["seconds"] == 5 and finished["gib"] == 0.11 and not finished["after_warmup"]


def test_v1_engine_core_initialization_failed_traceback():
    events = _events("v1_gptoss_h100_engine_core_init_failed.log")
    # Frames and source echo (`raise RuntimeError("Engine core initialization failed. "`)
    # are not events; the exception line is, once.
    assert _kinds(events) == {"engine_died": 1}
    assert events[0].line_no == 18
    seen = _observed("v1_gptoss_h100_engine_core_init_failed.log")
    assert seen[("log_events", f"kind={UNRECOGNISED}")] == 1  # its root cause is "above"
    assert ("log_events", "kind=cuda_oom") not in seen


def test_v1_runtime_oom_then_output_handler_death():
    events = _events("v1_runtime_oom_enginecore_asyncllm.log")
    assert _kinds(events) == {"cuda_oom": 1, "engine_died": 1, UNRECOGNISED: 1}
    oom = _of(events, "cuda_oom")[0]
    assert oom["where"] == "cuda" and oom["tried_gib"] == pytest.approx(50 / 1024)
    assert _of(events, "engine_died")[0]["reason"] == "AsyncLLM output_handler failed"
    # The traceback's exception line was cut off by the excerpt: it stays unexplained.
    assert "Traceback" in next(e.text for e in events if e.kind == UNRECOGNISED)
    assert _observed("v1_runtime_oom_enginecore_asyncllm.log")[("log_events", "kind=cuda_oom")] == 1


# -- SGLang ------------------------------------------------------------------------------


def test_sglang_01x_new_fill_batch_and_bare_decode_status():
    events = _events("sglang_0.1.x_new_fill_batch_2024-04.log")
    batches = _of(events, "sglang_batch")
    assert _kinds(events) == {"sglang_batch": 6}
    assert [b["phase"] for b in batches] == ["prefill"] * 5 + ["decode"]
    assert [b["waiting"] for b in batches[:5]] == [4, 3, 2, 1, 0]  # #remaining_req
    assert batches[0]["#cached_token"] == 757 and batches[0]["prefix_cache_hit_rate_pct"] == 80.83
    assert batches[5]["kv_cache_usage"] == 0.24 and batches[5]["running"] == 5
    seen = _observed("sglang_0.1.x_new_fill_batch_2024-04.log")
    assert seen[("kv_cache_usage", "")] == 0.24
    # SGLang logs every retraction, but this excerpt has no clock: its span is unknown,
    # so "no retraction" is not claimed for it.
    assert ("preemptions_rate", "") not in seen


def test_a_followed_sglang_log_shows_no_retraction_only_over_time_it_covered():
    data = _read("sglang_2026_decode_batch_comma_cudagraph.log")
    half = data.index(b"\n", len(data) // 2) + 1
    state, first = observe.observe_log(FollowerState(), data[:half], NOW)
    # Four seconds of a pasted log say nothing about retractions around them ...
    assert not [o for o in first.observations if o[0] == "preemptions_rate"]
    # ... the next read of a followed log covers the time since the previous one.
    _, second = observe.observe_log(state, data[half:], NOW)
    assert ("preemptions_rate", "", 0.0) in second.observations


def test_sglang_046_prefill_batch_with_period_no_rank():
    batches = _of(_events("sglang_0.4.6_prefill_batch_cached.log"), "sglang_batch")
    assert [b["kv_cache_usage"] for b in batches] == [0.26, 0.30, 0.34]
    assert [b["#cached-token"] for b in batches] == [8027, 16030, 20050]
    assert {b["waiting"] for b in batches} == {0}


def test_sglang_rank_only_prefix_abbreviated_by_the_user():
    events = _events("sglang_2025-05_kv_not_released_token_usage096.log")
    assert [e.process for e in events] == ["TP0", "TP0"]
    assert [b["kv_cache_usage"] for b in _of(events, "sglang_batch")] == [0.96, 0.96]
    assert [b["#token"] for b in _of(events, "sglang_batch")] == [958017, 959430]


def test_sglang_decode_batch_comma_with_trailing_comma():
    batches = _of(_events("sglang_2025-12_decode_kv094_queue_trailing_comma.log"), "sglang_batch")
    assert len(batches) == 5
    assert {(b["kv_cache_usage"], b["waiting"], b["running"]) for b in batches} == {(0.94, 5, 6)}
    assert all(b["cuda graph"] is True for b in batches)


def test_sglang_swa_pools_and_a_lost_opening_bracket():
    events = _events("sglang_2026-05_decode_before_retraction_full_swa.log")
    batches = _of(events, "sglang_batch")
    assert len(batches) == 3  # the first line lost its '[' and is still read
    assert events[0].timestamp == datetime(2026, 5, 24, 3, 51, 44) and events[0].process == "TP0"
    assert {b["kv_cache_usage"] for b in batches} == {1.0}  # full-attention pool
    assert {b["swa_kv_cache_usage"] for b in batches} == {0.06}
    assert [b["generation_throughput"] for b in batches] == [429.34, 429.52, 429.74]


def test_sglang_2026_decode_comma_lines():
    batches = _of(_events("sglang_2026_decode_batch_comma_cudagraph.log"), "sglang_batch")
    assert len(batches) == 8 and {b["kv_cache_usage"] for b in batches} == {0.29}


def test_sglang_2026_prefill_and_decode_mixed():
    events = _events("sglang_2026_prefill_decode_mixed.log")
    batches = _of(events, "sglang_batch")
    assert [b["phase"] for b in batches] == ["decode", "prefill", "prefill", "prefill"]
    assert [b.get("#new-token") for b in batches[1:]] == [158, 290, 160]
    assert batches[0]["running"] == 32 and batches[0]["generation_throughput"] == 1635.11
    assert _kinds(events) == {"sglang_batch": 4}  # access lines are not events


# -- gc logs -----------------------------------------------------------------------------


def test_cpython_debug_stats_snippet_cut_before_its_collecting_line():
    log = parse_gc_text(_read("cpython_debug_stats_snippet.log").decode(), year=2022)
    first, second = log.collections
    assert first.generation == -1 and first.elapsed_s == 0.0008 and first.unreachable == 180
    assert second.generation == 0 and second.elapsed_s is None
    assert analyse_gc_log(log).signals["artifact_gc_pause_max_ms"] == pytest.approx(0.8)


def test_vllm_gc_debug_gen2_pauses():
    text = _read("vllm_0.24_gc_debug_gen2_teardown_a100.log").decode()
    log = parse_gc_text(text, year=2026)
    assert [(c.generation, c.elapsed_s, c.unreachable) for c in log.collections] == [
        (2, 4.44236, 377), (2, 2.164036, 377)
    ]  # fmt: skip
    signals = analyse_gc_log(log).signals
    assert signals["artifact_gc_gen2_pause_max_ms"] == pytest.approx(4442.36)
    # The engine log follower reads the same lines as pauses, not as unrecognised lines.
    events = _events("vllm_0.24_gc_debug_gen2_teardown_a100.log")
    assert _of(events, "gc_pause")[0] == {
        "ms": 4442.36, "generation": 2, "collected": 377, "objects": 1052645
    }  # fmt: skip


# -- every excerpt is read the same however the bytes arrive ------------------------------


def _all_logs() -> list[str]:
    if samples_absent(REAL):
        return []
    return sorted(p.name for folder in LOG_FOLDERS for p in (REAL / folder).glob("*.log"))


def test_every_real_log_excerpt_has_a_test_here():
    source = Path(__file__).read_text(encoding="utf-8")
    missing = [name for name in _all_logs() if f'"{name}"' not in source]
    assert not missing, f"real excerpts without a test: {missing}"


@pytest.mark.parametrize("name", _all_logs())
def test_chunked_reads_give_the_same_events(name):
    data = _read(name)
    whole = [(e.kind, e.line_no, dict(e.values)) for e in parse_log(data, NOW)]
    for size in (1, 13, 4096):
        follower = LogFollower(NOW)
        got = []
        for i in range(0, len(data), size):
            got.extend(follower.feed(data[i : i + size]))
        got.extend(follower.feed(b"", final=True))
        assert [(e.kind, e.line_no, dict(e.values)) for e in got] == whole
