"""A failure and the engine that comes after it, as the log shows them.

Two wrong answers came from here: the next engine's warm-up captures after an OOM
restart were counted as captures after warm-up (confirming CUDA-graph pool growth on an
allocator leak), and one OOM counted twice (the traceback's ``torch.OutOfMemoryError``
and the ``RuntimeError: Worker failed with error 'CUDA out of memory ...'`` that wraps
it). Built from real lines (../shared/samples/real) and from what enginesim prints.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from enginesim.artifacts import graph_capture_messages, oom_messages, render_messages
from probes import observe
from probes.parsing.logevents import UNRECOGNISED, FollowerState, feed, parse_log
from tests.support.samples import REAL, samples_absent

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
T0 = datetime(2026, 5, 1, 14, 30, 0)
GiB = 1 << 30
needs_real = pytest.mark.skipif(samples_absent(REAL), reason="shared real samples absent")


def _real(name: str) -> str:
    folder = "sglang_logs" if name.startswith("sglang") else "vllm_logs"
    return (REAL / folder / name).read_text()


def _kinds(events) -> Counter:
    return Counter(e.kind for e in events)


def _late(events) -> list[bool]:
    return [
        bool(e.values["after_warmup"]) for e in events if e.kind == "cuda_graph_capture_finished"
    ]


def _vllm(ts: datetime, proc: str, level: str, where: str, msg: str) -> str:
    return f"({proc}) {level} {ts:%m-%d %H:%M:%S} [{where}] {msg}"


def _captures(at: datetime) -> list[str]:
    """vLLM V1's capture bars and summary, as enginesim renders them."""
    msgs = graph_capture_messages(13, "FULL_AND_PIECEWISE", 3.0, 0.35, process="Worker_TP0")
    return render_messages(msgs, at, crlf=False)


def _vllm_ready(at: datetime) -> list[str]:
    core = "EngineCore_DP0 pid=241"
    return [
        _vllm(at, core, "INFO", "core.py:250",
              "init engine (profile, create kv cache, warmup model) took 63.41 s"),
        _vllm(at, "APIServer pid=1", "INFO", "launcher.py:46",
              "Starting vLLM API server 0 on http://0.0.0.0:8000"),
        "(APIServer pid=1) INFO:     Application startup complete.",
    ]  # fmt: skip


def _vllm_stats(at: datetime) -> str:
    return _vllm(
        at, "APIServer pid=1", "INFO", "loggers.py:236",
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.0 "
        "tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.1%",
    )  # fmt: skip


def _vllm_oom(at: datetime) -> list[str]:
    """enginesim's worker OOM cascade: worker traceback, engine core, API server."""
    msgs = oom_messages(
        24 * (1 << 20), 10 * (1 << 20), process_in_use_bytes=79 * GiB, allocated_bytes=70 * GiB
    )
    return "\n".join(render_messages(msgs, at, crlf=False)).splitlines()


# -- warm-up after a restart -----------------------------------------------------------


@needs_real
def test_vllm_the_next_servers_warm_up_captures_are_warm_up_again():
    """Real start-up and OOM lines of vLLM 0.11; captures between the new banner and the
    new ready line are warm-up, the first capture after it is not."""
    boot = _real("v1_0.11.0_nv25.11_startup_bulleted_paste.log").splitlines()
    crash = _real("v1_runtime_oom_enginecore_asyncllm.log").splitlines()
    t1 = T0 + timedelta(minutes=9)
    log = [
        *boot, *_captures(T0), *_vllm_ready(T0), _vllm_stats(T0 + timedelta(seconds=10)),
        *crash,
        *boot, *_captures(t1), *_vllm_ready(t1), _vllm_stats(t1 + timedelta(seconds=10)),
        *_captures(t1 + timedelta(seconds=30)),  # a shape captured on the fly
    ]  # fmt: skip
    events = parse_log("\n".join(log) + "\n", NOW)
    assert _late(events) == [False, False, True]
    kinds = _kinds(events)
    assert kinds["restart"] == 1  # "Starting vLLM API server 0 on" is the ready line
    assert kinds["server_start"] == 2


def test_vllm_starting_api_server_line_ends_warm_up_and_starts_nothing():
    log = [_vllm(T0, "APIServer pid=1", "INFO", "api_server.py:1839",
                 "vLLM API server version 0.11.0"),
           _vllm(T0, "EngineCore_DP0 pid=241", "INFO", "core.py:77",
                 "Initializing a V1 LLM engine (v0.11.0) with config: model='m'"),
           *_captures(T0), *_vllm_ready(T0)[1:2],
           *_captures(T0 + timedelta(seconds=60))]  # fmt: skip
    events = parse_log("\n".join(log) + "\n", NOW)
    assert _kinds(events)["restart"] == 0
    assert [e.kind for e in events if e.kind.endswith("_start")] == [
        "server_start",
        "engine_start",
    ]
    assert _late(events) == [False, True]


SG = "[2026-05-01 14:{:02d}:{:02d} TP0] "
SG_BOOT = [
    "server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, mem_fraction_static=0.88)",
    "Load weight begin. avail mem=78.12 GB",
    "Capture cuda graph begin. This can take up to several minutes. avail mem=9.80 GB",
    "Capture cuda graph end. Time elapsed: 12.31 s. mem usage=1.42 GB. avail mem=8.38 GB.",
    "max_total_num_tokens=412000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=4096, context_len=40960, available_gpu_mem=8.38 GB",
    "The server is fired up and ready to roll!",
]
SG_DECODE = (
    "Decode batch, #running-req: 12, #token: 40000, token usage: 0.10, cuda graph: True, "
    "gen throughput (token/s): 800.00, #queue-req: 0"
)
# SGLang's scheduler logs the whole chained traceback in one record, then its parent dies.
SG_CRASH = """\
Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 380, in __init__
    self.capture()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
capacity of 79.19 GiB of which 1.02 GiB is free.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/sgl/srt/managers/scheduler.py", line 2900, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 382, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 \
has a total capacity of 79.19 GiB of which 1.02 GiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)"""


def _sglang(minute: int, lines: list[str]) -> list[str]:
    return [SG.format(minute, i) + line for i, line in enumerate(lines)]


@pytest.mark.parametrize(
    "restart",
    [
        pytest.param(SG_BOOT, id="server_args banner"),
        pytest.param(SG_BOOT[1:], id="scheduler start only"),
        pytest.param(SG_BOOT[2:], id="death then captures, no banner (enginesim)"),
    ],
)
def test_sglang_captures_after_a_death_are_the_next_engines_warm_up(restart):
    log = [
        *_sglang(0, SG_BOOT),
        *_sglang(1, [SG_DECODE]),
        *_sglang(9, [SG_CRASH]),
        "[2026-05-01 14:09:59] Received sigquit from a child process. It usually means the "
        "child failed.",
        *_sglang(11, restart),
        *_sglang(12, [SG_DECODE, "Capture cuda graph begin. avail mem=8.00 GB",
                      "Capture cuda graph end. Time elapsed: 1.10 s. mem usage=1.60 GB."]),
    ]  # fmt: skip
    events = parse_log("\n".join(log) + "\n", NOW)
    assert _late(events) == [False, False, True]
    kinds = _kinds(events)
    assert kinds["restart"] == (1 if restart[0] != SG_BOOT[2] else 0)
    assert kinds["cuda_oom"] == 1 and kinds["cuda_oom_reraised"] == 1
    assert kinds[UNRECOGNISED] == 0  # the chaining banner is part of the traceback


def test_the_after_warmup_zero_waits_for_the_next_engines_ready_line():
    """Between a death and the next ready line nobody knows whether a capture will come."""
    dead = [*_sglang(0, SG_BOOT), *_sglang(9, [SG_CRASH])]
    _, seen = observe.observe_log(FollowerState(), ("\n".join(dead) + "\n").encode(), NOW)
    counts = {lab: v for sig, lab, v in seen.observations if sig == "log_events"}
    assert "kind=cuda_graph_capture_after_warmup" not in counts
    assert counts["kind=cuda_oom"] == 1
    again = ("\n".join(_sglang(11, SG_BOOT)) + "\n").encode()
    _, seen = observe.observe_log(observe.state_from_json(seen.snapshot["follower"]), again, NOW)
    counts = {lab: v for sig, lab, v in seen.observations if sig == "log_events"}
    assert counts["kind=cuda_graph_capture_after_warmup"] == 0
    assert counts["kind=restart"] == 1


# -- one failure, one OOM --------------------------------------------------------------


@needs_real
def test_real_oom_line_and_the_runtime_error_that_wraps_it_are_one_oom():
    """vLLM V1's engine core re-raises a worker's OOM as ``RuntimeError: Worker failed
    with error '<the OOM>', please check the stack trace above for the root cause``."""
    real = _real("v1_runtime_oom_enginecore_asyncllm.log").splitlines()
    oom_line = next(line for line in real if "torch.OutOfMemoryError" in line)
    head, _, text = oom_line.partition("torch.OutOfMemoryError: ")
    wrapped = (
        f"{head}RuntimeError: Worker failed with error '{text}', please check the stack "
        "trace above for the root cause"
    )
    events = parse_log("\n".join([oom_line, wrapped, *real[1:]]) + "\n", NOW)
    kinds = _kinds(events)
    assert kinds["cuda_oom"] == 1 and kinds["cuda_oom_reraised"] == 1
    (again,) = [e for e in events if e.kind == "cuda_oom_reraised"]
    assert again.values["of_line"] == 1 and again.values["tried_gib"] == pytest.approx(50 / 1024)


def test_enginesims_oom_cascade_is_one_oom():
    events = parse_log("\n".join(_vllm_oom(T0)) + "\n", NOW)
    assert _kinds(events)["cuda_oom"] == 1
    assert _kinds(events)["cuda_oom_reraised"] == 1
    assert _kinds(events)[UNRECOGNISED] == 0


@needs_real
def test_two_ooms_with_a_restart_between_are_two():
    boot = _real("v1_0.11.0_nv25.11_startup_bulleted_paste.log").splitlines()
    t1 = T0 + timedelta(minutes=6)
    log = [*boot, *_vllm_ready(T0), *_vllm_oom(T0 + timedelta(minutes=5)),
           *boot, *_vllm_ready(t1), *_vllm_oom(t1 + timedelta(minutes=5))]  # fmt: skip
    kinds = _kinds(parse_log("\n".join(log) + "\n", NOW))
    assert kinds["cuda_oom"] == 2 and kinds["cuda_oom_reraised"] == 2
    assert kinds["restart"] == 1


def test_two_ooms_minutes_apart_are_two_even_with_nothing_between():
    """An excerpt grepped for errors shows no life signs; the time between tells."""
    line = "CUDA out of memory. Tried to allocate 24.00 MiB."
    log = [_vllm(T0, "EngineCore pid=1", "ERROR", "core.py:1", f"torch.OutOfMemoryError: {line}"),
           _vllm(T0 + timedelta(minutes=5), "EngineCore pid=2", "ERROR", "core.py:1",
                 f"torch.OutOfMemoryError: {line}")]  # fmt: skip
    assert _kinds(parse_log("\n".join(log) + "\n", NOW))["cuda_oom"] == 2


def test_ooms_of_different_sizes_or_pools_are_different_failures():
    at = T0
    log = [
        _vllm(at, "Worker_TP0 pid=3", "ERROR", "w.py:1",
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
        _vllm(at, "Worker_TP1 pid=4", "ERROR", "w.py:1",
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."),
        _vllm(at, "Worker_TP2 pid=5", "ERROR", "w.py:1",
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."),
        SG.format(30, 0) + "Prefill out of memory. Try to lower your batch size.",
    ]  # fmt: skip
    events = parse_log("\n".join(log) + "\n", NOW)
    # TP ranks failing on the same allocation at once are one failure of one engine.
    assert [e.kind for e in events] == ["cuda_oom", "cuda_oom", "cuda_oom_reraised", "cuda_oom"]


def test_a_re_raise_read_in_the_next_cycle_explains_the_death_there():
    lines = _vllm_oom(T0)
    cut = next(i for i, line in enumerate(lines) if "EngineCore encountered" in line)
    first = ("\n".join(lines[:cut]) + "\n").encode()
    rest = ("\n".join(lines[cut:]) + "\n").encode()
    _, seen = observe.observe_log(FollowerState(), first, NOW)
    state = observe.state_from_json(seen.snapshot["follower"])
    assert state.failure and state.failure_at is not None
    _, seen = observe.observe_log(state, rest, NOW)
    counts = {lab: v for sig, lab, v in seen.observations if sig == "log_events"}
    assert counts["kind=cuda_oom_reraised"] == 1
    assert counts["kind=cuda_oom"] == 0  # counted in the read before
    assert f"kind={UNRECOGNISED}" not in counts  # the death's cause is the re-raised OOM


def test_hostile_flood_of_oom_lines_is_one_failure_and_bounded_state():
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9" + "9" * 20000
    state, events = feed(FollowerState(), (line + "\n").encode() * 300, NOW, final=True)
    kinds = _kinds(events)
    assert kinds["cuda_oom"] == 1 and kinds["cuda_oom_reraised"] == 299
    assert kinds["line_truncated"] == 300
    assert len(state.failure) < 64
    garbage = "\n".join(
        ["Tried to allocate 1.00 GiB CUDA out of memory"] * 3
        + ["During handling of the above exception, another exception occurred:"] * 3
    )
    assert _kinds(parse_log(garbage + "\n", NOW))["cuda_oom"] == 1


def _chunk_budget(lines: list[str]) -> float | None:
    text = "".join(line + "\n" for line in lines).encode()
    _, seen = observe.observe_log(FollowerState(), text, datetime(2026, 5, 1, 15, tzinfo=UTC))
    found = {s: v for s, labels, v in seen.observations if s == "log_chunk_budget_tokens"}
    return found.get("log_chunk_budget_tokens")


def test_the_chunk_budget_is_what_the_engines_run_with_and_unbounded_when_one_is_off():
    """SGLang's ``chunked_prefill_size``: 8,192 is a budget; -1 is chunking off (whole
    prompts in a step: no bound, recorded as such so an earlier budget stops standing);
    of two engines the larger budget bounds the steps. Nothing to say: nothing."""
    line = SG_BOOT[4] + SG_BOOT[5]
    assert _chunk_budget([SG.format(0, 1) + line]) == 8192
    off = line.replace("chunked_prefill_size=8192", "chunked_prefill_size=-1")
    assert _chunk_budget([SG.format(0, 1) + line, SG.format(0, 2) + off]) == observe.NO_CHUNK_BOUND
    bigger = line.replace("chunked_prefill_size=8192", "chunked_prefill_size=16384")
    assert _chunk_budget([SG.format(0, 1) + line, SG.format(0, 2) + bigger]) == 16384
    assert _chunk_budget([SG.format(0, 3) + SG_DECODE]) is None


def test_a_restart_that_logs_no_budget_unbinds_the_one_logged_before():
    """From a restart's banner on, the budget the previous start logged no longer bounds
    anything; until its own budget line is read it is not known (a banner comes seconds
    before the engine's config, and a crash-looping engine can die in between). The
    banner and the line that follows it in one read are one start: its budget stands."""
    booted = [SG.format(0, i) + text for i, text in enumerate(SG_BOOT)]
    assert _chunk_budget(booted) == 8192  # server_args banner, then the budget line
    restarted = [*booted, SG.format(1, 0) + SG_DECODE, SG.format(2, 0) + SG_BOOT[0]]
    assert _chunk_budget(restarted) == observe.CHUNK_BUDGET_UNKNOWN


def test_a_vllm_032_budget_line_before_its_engine_start_is_that_starts():
    """vLLM 0.32's API server logs the budget while building its config, before the
    engine core's "Initializing a V1 LLM engine" line: the budget stands for that start,
    and a restart's own line replaces it. Up without one (0.32 on CPU logs none unless
    the budget is set), the budget is not known: no evidence either way."""
    at = "({}) INFO 05-01 14:0{}:00 [{}] {}"
    budget = at.format("APIServer pid=1", 1, "scheduler.py:308", "Chunked prefill is enabled "
                       "with max_num_batched_tokens={}.")  # fmt: skip
    start = at.format("EngineCore pid=2", 2, "core.py:133", "Initializing a V1 LLM engine "
                      "(v0.32.0) with config: model='m', enable_chunked_prefill=True")  # fmt: skip
    ready = "(APIServer pid=1) INFO:     Application startup complete."
    # A real 0.32 start-up logs warnings between the two lines; none of them ends the boot.
    warning = "(APIServer pid=1) WARNING 05-01 14:01:30 [cpu.py:224] Triton is not installed."
    first = [budget.format(2048), warning, start, ready]
    assert _chunk_budget(first) == 2048
    assert _chunk_budget([*first, budget.format(256), start, ready]) == 256
    assert _chunk_budget([*first, start, ready]) == observe.CHUNK_BUDGET_UNKNOWN
    assert _chunk_budget([start, ready]) == observe.CHUNK_BUDGET_UNKNOWN


def test_a_real_vllm_032_start_keeps_the_budget_it_logged_before_its_engine_started():
    """The real engine's own start-up (tests/realengine/captures, vLLM 0.32 on CPU), with
    a budget line put where a vLLM that logs one would (after ``non-default args``, before
    the engine core's "Initializing a V1 LLM engine" and whatever the start-up logs in
    between): it stands for that start. The capture itself logged none (below)."""
    capture = Path(__file__).resolve().parents[1] / "realengine" / "captures"
    lines = (capture / "vllm-0.32-cpu-server.log").read_text().splitlines()
    up = next(i for i, line in enumerate(lines) if "Application startup complete" in line)
    args = next(i for i, line in enumerate(lines) if "non-default args" in line)
    budget = (
        "(APIServer pid=22777) INFO 12-01 22:19:48 [scheduler.py:308] Chunked prefill is "
        "enabled with max_num_batched_tokens=2048."
    )
    start = [*lines[: args + 1], budget, *lines[args + 1 : up + 1]]
    assert _chunk_budget(start) == 2048
    assert _chunk_budget(lines[: up + 1]) == observe.CHUNK_BUDGET_UNKNOWN  # 0.32 logged none


def test_a_real_vllm_032_budget_is_read_from_the_arguments_it_was_given():
    """vLLM 0.32 on CPU logs no "Chunked prefill is enabled" line, set or not (both real
    captures): the long-prefill incident's engine names its 2,048 only in ``non-default
    args``, and a CI run read its budget as "not known" (the incident went unconfirmed).
    The default engine's arguments carry no budget: still not known, never a guess."""
    capture = Path(__file__).resolve().parents[1] / "realengine" / "captures"
    prefill = (capture / "vllm-0.32-cpu-prefill-start.log").read_text().splitlines()
    assert not any("Chunked prefill is enabled" in line for line in prefill)
    assert _chunk_budget(prefill) == 2048
    default = (capture / "vllm-0.32-cpu-server.log").read_text().splitlines()
    up = next(i for i, line in enumerate(default) if "Application startup complete" in line)
    assert _chunk_budget(default[: up + 1]) == observe.CHUNK_BUDGET_UNKNOWN
    # A restart with other arguments: its own budget, or not known where it sets none.
    assert _chunk_budget([*prefill, *default[: up + 1]]) == observe.CHUNK_BUDGET_UNKNOWN
    assert _chunk_budget([*default[: up + 1], *prefill]) == 2048


@pytest.mark.parametrize(
    ("args", "budget"),
    [
        ("non-default args: {'model': 'm', 'max_num_batched_tokens': 8192, 'port': 1}", 8192),
        ("non-default args: {'model': 'm', 'max_num_seqs': 64}", None),
        ("args: Namespace(model='m', max_num_batched_tokens=4096, max_num_seqs=256)", 4096),
        ("args: Namespace(model='m', max_num_batched_tokens=None, max_num_seqs=256)", None),
        # Not an argument list: a prompt or a path that mentions the name proves nothing.
        ("Received request: prompt='max_num_batched_tokens': 512", None),
    ],
)
def test_the_budget_among_vllm_arguments_in_both_forms(args: str, budget: float | None):
    line = f"(APIServer pid=1) INFO 05-01 14:01:30 [api_utils.py:286] {args}"
    start = (
        "(EngineCore pid=2) INFO 05-01 14:01:31 [core.py:133] Initializing a V1 LLM engine "
        "(v0.9.2) with config: model='m'"
    )
    got = _chunk_budget([line, start])
    assert got == (budget if budget is not None else observe.CHUNK_BUDGET_UNKNOWN)
