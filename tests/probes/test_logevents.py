# ruff: noqa: E501 (real log lines are long)
from __future__ import annotations

from datetime import datetime

from probes.parsing.logevents import LogFollower, infer_year, parse_log

NOW = datetime(2026, 3, 1, 12, 0, 0)

LOG = """\
(APIServer pid=7) INFO 02-12 19:50:01 [api_server.py:1] vLLM API server version 0.11.0
INFO 02-12 19:50:05 [scheduler.py:1] Chunked prefill is enabled with max_num_batched_tokens=8192.
(EngineCore_DP0 pid=241) INFO 02-12 19:50:07 [gpu_model_runner.py:1] Model loading took 35.12 GiB memory and 20.5 seconds
(EngineCore_DP0 pid=241) INFO 02-12 19:50:08 [gpu_worker.py:1] Available KV cache memory: 30.50 GiB
(EngineCore_DP0 pid=241) INFO 02-12 19:50:09 [kv_cache_utils.py:1291] GPU KV cache size: 767,552 tokens
(EngineCore_DP0 pid=241) INFO 02-12 19:50:09 [kv_cache_utils.py:1295] Maximum concurrency for 32,768 tokens per request: 84.29x
Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  10%|#         | 7/67 [00:01<00:09]\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:05<00:00]
(EngineCore_DP0 pid=241) INFO 02-12 19:50:20 [gpu_model_runner.py:1] Graph capturing finished in 6 secs, took 0.51 GiB
(APIServer pid=7) INFO 02-12 19:51:00 [loggers.py:1] Engine 000: Avg prompt throughput: 1234.5 tokens/s, Avg generation throughput: 88.0 tokens/s, Running: 12 reqs, Waiting: 3 reqs, Preemptions: 2, GPU KV cache usage: 91.3%, Prefix cache hit rate: 12.0%
(APIServer pid=7) INFO 02-12 19:51:05 [loggers.py:1] Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.5%, Prefix cache hit rate: 0.0%
(EngineCore_DP0 pid=241) INFO 02-12 19:52:20 [gpu_model_runner.py:1] Graph capturing finished in 1 secs, took 0.80 GiB
(EngineCore_DP0 pid=241) ERROR 02-12 19:53:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 79.11 GiB
(APIServer pid=7) ERROR 02-12 19:53:01 [async_llm.py:1] EngineDeadError: EngineCore encountered an issue.
(APIServer pid=9) INFO 02-12 19:55:01 [api_server.py:1] vLLM API server version 0.11.0
INFO 05-30 06:41:50 model_runner.py:1562] Graph capturing finished in 49 secs, took 0.17 GiB
INFO 06-05 13:03:28 [metrics.py:1] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 5.1 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 0.3%, CPU KV cache usage: 0.0%.
[2025-01-15 10:23:40 TP0] Capture cuda graph end. Time elapsed: 1.24 s. mem usage=0.09 GB. avail mem=2.89 GB.
[2025-01-15 10:23:41 TP0] max_total_num_tokens=1960896, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=512, context_len=131072, available_gpu_mem=12.30 GB
[2025-01-15 10:23:42] The server is fired up and ready to roll!
[2025-01-15 10:23:45 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4000 -> 0.6000
[2025-01-15 10:23:46 TP0] Decode batch, #running-req: 5, #token: 1000, token usage: 0.45, cuda graph: True, gen throughput (token/s): 123.4, #queue-req: 0
"""


def _kinds(events):
    return [e.kind for e in events]


def test_whole_log_events_in_order():
    events = parse_log(LOG, NOW)
    assert _kinds(events) == [
        "server_start", "chunked_prefill", "model_loading", "kv_cache_memory",
        "kv_cache_tokens", "max_concurrency", "cuda_graph_capture_started",
        "cuda_graph_capture_finished", "stats", "stats", "cuda_graph_capture_finished",
        "cuda_oom", "engine_died", "restart", "server_start",
        "cuda_graph_capture_finished", "stats", "cuda_graph_capture_finished",
        "sglang_budget", "engine_ready", "kv_retraction", "sglang_batch",
    ]  # fmt: skip
    by_kind = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    first_capture, late_capture = by_kind["cuda_graph_capture_finished"][:2]
    assert first_capture.values == {
        "seconds": 6.0, "gib": 0.51, "encoder": False, "after_warmup": False
    }  # fmt: skip
    assert late_capture.values["after_warmup"] is True  # after the first stats line
    assert by_kind["cuda_graph_capture_finished"][2].values["after_warmup"] is False  # restart
    assert by_kind["chunked_prefill"][0].values["max_num_batched_tokens"] == 8192
    assert by_kind["kv_cache_tokens"][0].values["tokens"] == 767552
    assert by_kind["max_concurrency"][0].values["factor"] == 84.29
    assert by_kind["cuda_oom"][0].values["tried_gib"] == 0.5
    v1, v1b, v0 = (e.values for e in by_kind["stats"])
    assert v1["engine"] == 0 and v1["preemptions"] == 2 and v1["kv_cache_usage_pct"] == 91.3
    assert "preemptions" not in v1b and v1b["engine"] == 1
    assert v0["shape"] == "v0" and v0["waiting"] == 2 and v0["cpu_kv_cache_usage_pct"] == 0
    assert by_kind["kv_retraction"][0].values["retracted_reqs"] == 3
    assert by_kind["sglang_budget"][0].values["max_running_requests"] == 512
    assert by_kind["sglang_batch"][0].values["cuda graph"] is True
    assert by_kind["server_start"][0].process == "APIServer"
    assert by_kind["server_start"][0].timestamp == datetime(2026, 2, 12, 19, 50, 1)
    assert by_kind["stats"][2].timestamp == datetime(2025, 6, 5, 13, 3, 28)  # after "now"
    assert by_kind["kv_retraction"][0].timestamp == datetime(2025, 1, 15, 10, 23, 45)


def test_year_inference():
    assert infer_year(12, 31, datetime(2026, 1, 1)) == 2025
    assert infer_year(1, 1, datetime(2026, 1, 1)) == 2026
    events = parse_log("INFO 02-29 00:00:00 [a.py:1] Available KV cache memory: 1 GiB\n", NOW)
    assert events[0].timestamp == datetime(2024, 2, 29)


def test_chunked_feed_matches_whole_log_at_every_split():
    data = LOG.encode()
    whole = [(e.kind, e.line_no, dict(e.values)) for e in parse_log(data, NOW)]
    for size in (1, 7, 64, 1000):
        follower = LogFollower(NOW)
        got = []
        for i in range(0, len(data), size):
            got.extend(follower.feed(data[i : i + size]))
        got.extend(follower.feed(b"", final=True))
        assert [(e.kind, e.line_no, dict(e.values)) for e in got] == whole


def test_invalid_utf8_and_long_lines_are_bounded_and_flagged():
    follower = LogFollower(NOW, max_line=100)
    events = list(follower.feed(b"\xff\xfe garbage \xc3"))
    events += follower.feed(b"\n" + b"x" * 150)
    events += follower.feed(b"y" * 10_000)  # still the same over-long line: dropped
    events += follower.feed(b"z\nINFO 02-12 19:50:05 [s.py:1] Chunked prefill is enabled ")
    events += follower.feed(b"with max_num_batched_tokens=2048.\n")
    assert _kinds(events) == ["line_truncated", "chunked_prefill"]
    assert events[1].line_no == 3
    assert follower.state.carry == b""
