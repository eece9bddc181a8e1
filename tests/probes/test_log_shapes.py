"""Log lines in the shapes collectors and pastes give them (kubectl, docker, journald,
compose, wrappers, bullets, Ray prefixes), the wordings of every era, and hostile input:
huge lines, endless glued records, invalid UTF-8. Each shape wraps a real vLLM or SGLang
line (docs/inputs-logs.md)."""

# ruff: noqa: E501 (real log lines are long)
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from probes.parsing.logevents import UNRECOGNISED, LogFollower, parse_log
from probes.parsing.logprefix import split_glued

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STATS = "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 843.6 tokens/s, Running: 38 reqs, Waiting: 2 reqs, GPU KV cache usage: 88.5%, Prefix cache hit rate: 42.4%"
V1 = f"(APIServer pid=1) INFO 10-14 17:02:38 [loggers.py:123] {STATS}"


def _one(line: str, kind: str = "stats"):
    events = [e for e in parse_log(line + "\n", NOW) if e.kind != "line_truncated"]
    assert [e.kind for e in events] == [kind], events
    return events[0]


@pytest.mark.parametrize(
    "line",
    [
        V1,
        f"2025-10-15T00:02:38.756689123Z {V1}",  # kubectl logs --timestamps / docker logs -t
        f"2025-10-15T00:02:38.756689123+07:00 stdout F {V1}",  # CRI log file
        f"Oct 14 17:02:38 gpu-7 vllm[4121]: {V1}",  # syslog / journalctl
        f"2025-10-14T17:02:38+0000 gpu-7 vllm[4121]: {V1}",  # journalctl -o short-iso
        f"vllm-1  | {V1}",  # docker compose
        f"[pod/vllm-0/vllm] {V1}",  # kubectl logs --prefix
        f"- {V1}",  # Markdown bullet of a paste
        f"> {V1}",  # quoted in an issue
        f"[2025-10-14 17:02:38] INFO {V1}",  # a wrapper's [date] LEVEL
        f"(RayWorkerWrapper pid=5425, ip=10.0.0.3) INFO 10-14 17:02:38 [loggers.py:123] {STATS}",
        f"INFO 10-14 17:02:38 loggers.py:123] {STATS}",  # V0: no opening bracket
        f"INFO 2025-10-14 17:02:38 [loggers.py:123] {STATS}",  # a logging config with years
    ],
)
def test_collector_and_paste_prefixes_are_peeled(line):
    event = _one(line)
    assert event.values["kv_cache_usage_pct"] == 88.5 and event.values["waiting"] == 2
    assert event.timestamp is not None and (event.timestamp.month, event.timestamp.day) == (10, 14)


def test_the_year_comes_from_the_line_when_it_has_one():
    assert _one(f"2024-10-15T00:02:38Z {V1}").timestamp.year == 2024
    assert _one(f"INFO 2023-10-14 17:02:38 [loggers.py:123] {STATS}").timestamp.year == 2023
    # A runtime stamp just after New Year, vLLM's local clock still in December.
    late = _one(f"2026-01-01T00:00:05Z (APIServer pid=1) INFO 12-31 19:00:05 [l.py:1] {STATS}")
    assert late.timestamp == datetime(2025, 12, 31, 19, 0, 5)
    assert late.received_at == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    # Nothing in the line: inferred from now (a date after now's is last year's).
    assert _one(V1).timestamp.year == 2025


@pytest.mark.parametrize(
    ("line", "process", "phase"),
    [
        (
            "[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: 0.94, cuda graph: True, gen throughput (token/s): 446.45, #queue-req: 5,",
            "TP0",
            "decode",
        ),
        (
            "[08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: 0.94, cuda graph: True, gen throughput (token/s): 446.45, #queue-req: 5",
            "TP0",
            "decode",
        ),
        (
            "[08:43:59] Decode batch. #running-req: 6, #token: 1920, token usage: 0.94, gen throughput (token/s): 446.45, #queue-req: 5",
            None,
            "decode",
        ),
        (
            "[DP1 TP0] Decode batch. #running-req: 6, #token: 1920, token usage: 0.94, #queue-req: 5",
            "DP1 TP0",
            "decode",
        ),
        (
            "2025-12-12 08:43:59 TP0] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.94, #running-req: 6, #queue-req: 5, cuda graph: True",
            "TP0",
            "prefill",
        ),
        ("#running-req: 6, #token: 1920, token usage: 0.94, #queue-req: 5", None, "decode"),
    ],
)
def test_sglang_batch_lines_of_every_era(line, process, phase):
    event = _one(line, "sglang_batch")
    assert event.process == process and event.values["phase"] == phase
    assert event.values["kv_cache_usage"] == 0.94 and event.values["waiting"] == 5


@pytest.mark.parametrize(
    ("line", "kind", "values"),
    [
        (
            "[2024-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.3741 -> 0.5410",
            "kv_retraction",
            {"retracted_reqs": 1},
        ),
        (
            "[2025-01-15 10:23:45 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4000 -> 0.6000",
            "kv_retraction",
            {"retracted_reqs": 3},
        ),
        (
            "WARNING 05-09 00:49:33 scheduler.py:1057] Sequence group 0 is preempted by PreemptionMode.SWAP mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_cumulative_preemption_cnt=1",
            "preemption",
            {"mode": "SWAP", "cumulative": 1},
        ),
        (
            "WARNING 03-01 00:49:33 scheduler.py:808] Sequence group 7 is preempted in RECOMPUTE mode",
            "preemption",
            {"mode": "RECOMPUTE"},
        ),
        (
            "(EngineCore_DP0 pid=9) ERROR 02-12 19:53:00 [core.py:1] RuntimeError: CUDA driver error: out of memory",
            "cuda_oom",
            {"where": "cuda"},
        ),
        (
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "cuda_oom",
            {"where": "cuda", "tried_gib": 2.0},
        ),
        (
            "RuntimeError: Prefill out of memory. Try to lower your batch size.",
            "cuda_oom",
            {"where": "kv_pool"},
        ),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            "cuda_oom",
            {"where": "kv_pool"},
        ),
        (
            "(EngineCore_DP0 pid=9) ERROR 02-12 19:53:00 [core.py:1] EngineCore failed to start.",
            "engine_died",
            {"reason": "EngineCore failed"},
        ),
        (
            "ERROR 02-12 19:53:00 [async_llm_engine.py:1] Engine background task failed",
            "engine_died",
            {"reason": "Engine background task failed"},
        ),
        (
            "[2025-03-29 18:56:25 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "engine_died",
            {"reason": "Scheduler hit an exception"},
        ),
        (
            "[2025-03-29 18:56:25] Received sigquit from a child process. It usually means the child failed.",
            "engine_died",
            {"reason": "Received sigquit from a child process"},
        ),
        (
            "Capturing batches (bs=160 avail_mem=10.21 GB):  50%|█████     | 12/23 [00:03<00:02,  4.12it/s]",
            "cuda_graph_capture_started",
            {"bs": 160, "avail_mem_gb": 10.21, "mode": "", "after_warmup": False},
        ),
        (
            "(EngineCore pid=3684) INFO 07-14 10:00:00 [gc_utils.py:70] GC took 12.5ms to complete. Collected 3 objects in GC generation 1.",
            "gc_pause",
            {"ms": 12.5, "generation": 1, "collected": 3},
        ),
    ],
)
def test_wordings_of_every_era(line, kind, values):
    event = _one(line, kind)
    assert {k: event.values[k] for k in values} == values


def test_a_traceback_is_explained_by_its_exception_line_or_stays_unrecognised():
    explained = """\
[2025-03-29 18:56:25 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/scheduler.py", line 2123, in run_scheduler_process
    scheduler.event_loop_overlap()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB.
"""
    assert [e.kind for e in parse_log(explained, NOW)] == ["engine_died", "cuda_oom"]
    unknown = """\
ERROR 02-12 19:53:00 [core.py:1] Traceback (most recent call last):
ERROR 02-12 19:53:00 [core.py:1]   File "/vllm/core.py", line 1, in run
ERROR 02-12 19:53:00 [core.py:1]     raise RuntimeError("out of memory")
ERROR 02-12 19:53:00 [core.py:1] RuntimeError: NVML_ERROR_INSUFFICIENT_RESOURCES: blocks ran dry
"""
    events = parse_log(unknown, NOW)
    assert [e.kind for e in events] == [UNRECOGNISED]  # source echo is never the event
    assert "Traceback" in events[0].text


def test_a_wrapped_line_is_joined_only_with_a_rest_that_is_no_record_of_its_own():
    wrapped = V1[:90] + "\n" + V1[90:] + "\n"
    (event,) = parse_log(wrapped, NOW)
    assert event.values["kv_cache_usage_pct"] == 88.5 and event.line_no == 1
    # A cut record followed by a record of its own: two records, never one.
    cut_then_bar = V1[:90] + "\nCapturing CUDA graphs (decode, FULL): 100%|█| 3/3 [00:01<00:00]\n"
    assert [e.kind for e in parse_log(cut_then_bar, NOW)] == ["stats", "cuda_graph_capture_started"]
    cut_then_record = V1[:90] + "\n" + V1 + "\n"
    events = parse_log(cut_then_record, NOW)
    assert [e.kind for e in events] == ["stats", "stats"]
    assert "kv_cache_usage_pct" not in events[0].values


def test_an_unrecognised_error_wording_is_never_silence():
    for line in (
        "ERROR 02-12 19:53:00 [worker.py:1] NCCL error: unhandled cuda error, NCCL version 2.21.5",
        "[2026-01-05 08:00:01 TP0] RuntimeError: out of memory on device 3 (a wording nobody taught us)",
        "Segmentation fault (core dumped)",
        'INFO:     10.0.0.1:4242 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error',
    ):
        assert [e.kind for e in parse_log(line + "\n", NOW)] == [UNRECOGNISED], line


# -- hostile input --------------------------------------------------------------------------


def test_endless_glued_records_are_cut_apart_within_the_line_bound():
    record = f"INFO 07-28 06:41:19 [loggers.py:118] {STATS}"
    line = record * 2000  # 2000 records glued into one 400 KB physical line
    follower = LogFollower(NOW)
    events = list(follower.feed(line.encode()))
    events += follower.feed(b"\n", final=True)
    kinds = [e.kind for e in events]
    assert kinds[0] == "line_truncated"  # cut at MAX_LINE, never parsed beyond it
    assert 0 < kinds.count("stats") <= 16 * 1024 // len(record) + 1
    assert split_glued(record * 3, NOW) == [record] * 3


def test_huge_lines_invalid_utf8_and_nuls_cost_only_themselves():
    follower = LogFollower(NOW, max_line=4096)
    chunks = [
        b"\xff\xfe\x00" * 50_000,  # garbage without a line end, 150 KB
        b"\n" + ("- " * 3000).encode() + b"\n",  # an endless bullet chain
        b"(" * 5000 + b" pid=1) INFO 02-12 19:50:05 [s.py:1] x\n",
        b"[" * 4000 + b"\n",
        V1.encode() + b"\n",
    ]
    events = [e for chunk in chunks for e in follower.feed(chunk)]
    events += follower.feed(b"", final=True)
    assert [e.kind for e in events if e.kind != "line_truncated"] == ["stats"]
    assert sum(e.kind == "line_truncated" for e in events) == 3
    assert follower.state.carry == b"" and not follower.state.held
