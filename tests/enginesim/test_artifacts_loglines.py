"""Simulated vLLM/SGLang lines must match the reference formats exactly."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from enginesim.artifacts import (
    GraphCapture,
    RankMemory,
    chunked_prefill_message,
    format_size,
    graph_capture_messages,
    oom_details,
    oom_messages,
    oom_messages_from_details,
    render_messages,
    restart_messages,
    sglang_decode_message,
    sglang_line,
    sglang_prefill_message,
    sglang_retract_message,
    startup_memory_messages,
    stats_message,
    torch_oom_text,
    vllm_line,
)

TS = datetime(2026, 2, 12, 19, 50, 9)  # vLLM logs carry no timezone
# engine-metrics.md §6: `(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s
# [%(fileinfo)s:%(lineno)d] %(message)s`, date `%m-%d %H:%M:%S`.
V1 = re.compile(
    r"^\((?P<proc>[A-Za-z0-9_]+) pid=(?P<pid>\d+)\) (?P<level>DEBUG|INFO|WARNING|ERROR) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d) \[(?P<file>[\w.]+):(?P<line>\d+)\] (?P<msg>.*)$"
)
V010 = re.compile(r"^(INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] .*$")
V0_OLD = re.compile(r"^(INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d [\w.]+:\d+\] .*$")
STATS_NEW = re.compile(
    r"^Engine (\d{3}): Avg prompt throughput: (\d+\.\d) tokens/s, Avg generation throughput: "
    r"(\d+\.\d) tokens/s, Running: (\d+) reqs, Waiting: (\d+) reqs(?:, Preemptions: (\d+))?, "
    r"GPU KV cache usage: (\d+\.\d)%(?:, Prefix cache hit rate: (\d+\.\d)%)?$"
)
STATS_LEGACY = re.compile(
    r"^Engine \d{3}: Avg prompt throughput: \d+\.\d tokens/s, Avg generation throughput: "
    r"\d+\.\d tokens/s, Running: \d+ reqs, Waiting: \d+ reqs, GPU KV cache usage: \d+\.\d%, "
    r"Prefix cache hit rate: \d+\.\d%$"
)
STATS_V0 = re.compile(
    r"^Avg prompt throughput: \d+\.\d tokens/s, Avg generation throughput: \d+\.\d tokens/s, "
    r"Running: \d+ reqs, Swapped: \d+ reqs, Pending: \d+ reqs, GPU KV cache usage: \d+\.\d%, "
    r"CPU KV cache usage: \d+\.\d%\.$"
)
CAPTURE_BAR = re.compile(
    r"^Capturing CUDA graphs \((decode|mixed prefill-decode), (PIECEWISE|FULL)\): 100%\|█+\| "
    r"(\d+)/\3 \[\d\d:\d\d<00:00, +\d+\.\d\d(it/s|s/it)\]$"
)
CAPTURE_DONE = re.compile(r"^Graph capturing finished in (\d+) secs, took (\d+\.\d\d) GiB$")
OOM = re.compile(
    r"torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate (?P<req>[\d.]+ [KMG]iB)\. "
    r"GPU (?P<gpu>\d+) has a total capacity of (?P<total>[\d.]+ GiB) of which "
    r"(?P<free>[\d.]+ [KMG]iB) is free\. Including non-PyTorch memory, this process has "
    r"(?P<used>[\d.]+ GiB) memory in use\. Of the allocated memory (?P<alloc>[\d.]+ GiB) is "
    r"allocated by PyTorch, (?:with (?P<private>[\d.]+ [KMG]iB) allocated in private pools "
    r"\(e\.g\., CUDA Graphs\), )?and (?P<unalloc>[\d.]+ [KMG]iB) is reserved by PyTorch but "
    r"unallocated\."
)
SGLANG = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: DP\d+)? TP(\d+)\] (.*)$")


def test_vllm_prefix_shapes() -> None:
    line = vllm_line(TS, "INFO", "kv_cache_utils.py", 1291, "GPU KV cache size: 1 tokens")
    assert line == (
        "(EngineCore_DP0 pid=241) INFO 02-12 19:50:09 [kv_cache_utils.py:1291] "
        "GPU KV cache size: 1 tokens"
    )
    assert V010.match(vllm_line(TS, "INFO", "core.py", 1, "x", process=None))
    assert V0_OLD.match(vllm_line(TS, "INFO", "metrics.py", 1, "x", process=None, bracket=False))


def test_startup_lines() -> None:
    msgs = startup_memory_messages(32.6, 41.2, 35.01, 114_688, 32_768, 3.5, tp_size=4,
                                   init_seconds=88.4, compile_seconds=21.0)  # fmt: skip
    lines = render_messages(msgs, TS)
    parsed = [V1.match(line) for line in lines]
    assert all(parsed)
    texts = [m["msg"] for m in parsed if m]
    assert texts[0] == "Model loading took 32.6 GiB memory and 41.200000 seconds"
    assert {m["proc"] for m in parsed[:4] if m} == {f"Worker_TP{i}" for i in range(4)}
    assert "Available KV cache memory: 35.01 GiB" in texts
    assert "GPU KV cache size: 114,688 tokens" in texts
    assert "Maximum concurrency for 32,768 tokens per request: 3.50x" in texts
    assert texts[-1] == (
        "init engine (profile, create kv cache, warmup model) took 88.40 s (compilation: 21.00 s)"
    )
    merged = startup_memory_messages(32.6, 41.2, 35.0, 114_688, 32_768, 3.5, merged_kv_line=True)
    assert any(", Maximum concurrency for" in m.message for m in merged)
    chunk = chunked_prefill_message(512).message
    assert chunk == "Chunked prefill is enabled with max_num_batched_tokens=512."


def test_graph_capture_lines() -> None:
    msgs = graph_capture_messages(11, "FULL_AND_PIECEWISE", 8.4, 0.31, decode_sizes=7)
    lines = render_messages(msgs, TS)
    bars = [line.split(") ", 1)[1] for line in lines[:2]]
    assert all(CAPTURE_BAR.match(b) for b in bars), bars
    assert bars[0].startswith("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|")
    assert "| 11/11 [" in bars[0] and "| 7/7 [" in bars[1]
    final = V1.match(lines[-1])
    assert final and CAPTURE_DONE.match(final["msg"])
    assert final["msg"] == "Graph capturing finished in 8 secs, took 0.31 GiB"
    legacy = render_messages(
        graph_capture_messages(35, "PIECEWISE", 48.0, 0.17, legacy_v0=True), TS
    )
    assert legacy[1].endswith(
        ") Capturing CUDA graph shapes: 100%|██████████| 35/35 [00:48<00:00,  1.37s/it]"
    )
    with pytest.raises(ValueError):
        graph_capture_messages(1, "EAGER", 1.0, 0.1)


def test_stats_lines() -> None:
    quiet = stats_message(1234.5, 567.8, 40, 47, 0.94, 0.123, 0)
    busy = stats_message(1234.5, 567.8, 40, 47, 0.94, None, 23)
    assert STATS_NEW.match(quiet.message) and "Preemptions" not in quiet.message
    match = STATS_NEW.match(busy.message)
    assert match and match[6] == "23" and match[8] is None
    assert busy.message == (
        "Engine 000: Avg prompt throughput: 1234.5 tokens/s, Avg generation throughput: "
        "567.8 tokens/s, Running: 40 reqs, Waiting: 47 reqs, Preemptions: 23, "
        "GPU KV cache usage: 94.0%"
    )
    assert STATS_LEGACY.match(stats_message(1.0, 2.0, 3, 4, 0.5, None, 9, legacy=True).message)
    assert STATS_V0.match(stats_message(1.0, 2.0, 3, 4, 0.5, None, 9, v0=True).message)
    (line,) = render_messages([quiet], TS)
    assert line.startswith("(APIServer pid=1) INFO 02-12 19:50:09 [loggers.py:")


def test_oom_cascade_quotes_the_snapshot_numbers() -> None:
    rank = RankMemory(0, 85031714816, 35 * 10**9, 35 << 30, 3 << 30,
                      (GraphCapture(10.0, 401, 2 << 30, True),), (), 100.0, 200.0)  # fmt: skip
    d = oom_details(rank)
    assert d is not None
    msgs = oom_messages(
        d.requested_bytes,
        d.device_free_bytes,
        total_bytes=d.total_bytes,
        process_in_use_bytes=d.process_in_use_bytes,
        allocated_bytes=d.allocated_bytes,
        private_pool_bytes=d.private_pool_allocated_bytes,
        reserved_unallocated_bytes=d.reserved_bytes - d.allocated_bytes,
    )
    lines = render_messages(msgs, TS, crlf=False)
    worker = lines[0].split("\n")
    assert all(V1.match(x) for line in lines for x in line.split("\n"))
    assert all(
        x.startswith("(Worker_TP0 pid=306) ERROR 02-12 19:50:09 [multiproc_executor")
        for x in worker
    )
    match = OOM.search(worker[-1])
    assert match, worker[-1]
    assert match["total"] == "79.19 GiB" and match["req"] == format_size(d.requested_bytes)
    assert match["private"] is not None
    assert lines[-1].endswith(
        "EngineCore encountered an issue. See stack trace (above) for the root cause."
    )
    assert "\r\n(Worker_TP0 pid=306) ERROR" in render_messages(msgs, TS)[0]
    assert oom_messages_from_details(d) == msgs


def test_torch_oom_text_and_sizes() -> None:
    assert format_size(1024) == "1024 bytes"
    assert format_size(1536) == "1.50 KiB"
    assert format_size(2 << 30) == "2.00 GiB"
    text = torch_oom_text(2 << 30, 0, 85031714816, 900 << 20, 78 << 30, 74 << 30, 0, 2 << 30)
    match = OOM.search("torch.OutOfMemoryError: " + text)
    assert match and match["private"] is None and match["free"] == "900.00 MiB"


def test_restart_sequence() -> None:
    lines = render_messages(restart_messages(new_pids={"APIServer": 7, "EngineCore_DP0": 90}), TS)
    assert V1.match(lines[0]) and "died unexpectedly" in lines[0]
    assert lines[1] == "(APIServer pid=1) INFO:     Shutting down"
    restarted = [V1.match(x) for x in lines[5:]]
    assert [m["pid"] for m in restarted if m] == ["7", "7", "90"]
    assert restarted[0] and restarted[0]["ts"] == "02-12 19:50:24"


def test_sglang_lines() -> None:
    retract = sglang_line(TS, sglang_retract_message(3, 2048, 0.7, 0.4123))
    match = SGLANG.match(retract)
    assert match and match[1] == "2026-02-12 19:50:09" and match[2] == "0"
    assert match[3] == (
        "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 2048, "
        "#new_token_ratio: 0.7000 -> 0.4123"
    )
    assert SGLANG.match(sglang_line(TS, "x", tp_rank=3, dp_rank=1))
    prefill = sglang_prefill_message(2, 4096, 128, 0.61, 30, 4, 0, False, 11234.5)
    prefill_shape = (
        r"^Prefill batch, #new-seq: 2, #new-token: 4096, #cached-token: 128, token usage: "
        r"0\.61, #running-req: 30, #queue-req: 4, #pending-token: 0, cuda graph: False, "
        r"input throughput \(token/s\): [\d.]+$"
    )
    assert re.match(prefill_shape, prefill)
    decode = sglang_decode_message(32, 48000, 0.42, True, 690.1, 0)
    assert decode.startswith("Decode batch, #running-req: 32, #token: 48000, token usage: 0.42, ")
