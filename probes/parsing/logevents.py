"""Events from vLLM / SGLang engine logs (reference/engine-metrics.md §6, §2.5).

The memory-pressure playbook needs "CUDA graphs captured *after* warm-up" (pool growth
that coincides with reserved-memory steps), startup memory budgets, OOMs, engine deaths,
restarts, preemptions (SGLang: retractions) and the periodic stats lines; operators grep
for exactly these lines. docs/inputs-logs.md lists every wording read, per engine and
version, and what it becomes.

A record's prefixes (container runtime, journald, compose, bullets of a paste, the
engine's own head in every era) are peeled by :mod:`probes.parsing.logprefix`; the
message is matched after that. Lines a viewer glued together are cut apart before a
record head; a stats or batch record a viewer hard-wrapped is joined with its rest only
when the rest cannot be a record of its own (two records are never merged into one).
Traceback frames and source echo are never events.

A line that looks like an error (``out of memory``, ``Traceback``, ``failed``, ``Error``,
level ERROR) but matches no known event becomes an ``unrecognised_error`` event: the one
thing that must not happen is that an OOM in a wording nobody taught the parser counts
as "no OOM". A traceback whose final exception line is a known event is explained by it.

:func:`feed` is a pure reducer over byte chunks that may split lines (and UTF-8
sequences) anywhere; lines longer than ``max_line`` are truncated and flagged with a
``line_truncated`` event; every regular expression runs on at most ``max_line``
characters, so a chunk costs time linear in its size.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from types import MappingProxyType

from probes.parsing.logprefix import Head, infer_year, split_glued, split_record

__all__ = [
    "LOG_FLAVOURS",
    "UNRECOGNISED",
    "FollowerState",
    "LogEvent",
    "LogFlavour",
    "LogFollower",
    "feed",
    "infer_year",
    "parse_line",
    "parse_log",
    "shows_every_preemption",
]

MAX_LINE = 16 * 1024
UNRECOGNISED = "unrecognised_error"
_LINE_END = re.compile(rb"\r\n|\r|\n")

_NUM = r"(\d+(?:\.\d+)?)"
_CAPTURE_FINISHED = re.compile(
    rf"(Encoder )?[Gg]raph capturing finished in {_NUM} secs?, took {_NUM} GiB"
)
_CAPTURE_START = re.compile(
    r"Capturing cudagraphs for decoding|^Capturing (?:prefill )?CUDA graphs?"
    r"(?: shapes| \((?P<mode>[^)]*)\))?"
    r"|Capture (?:cuda graph|(?P<target>[\w ]+?) CUDA graph) begin"
    rf"|^Capturing batches \(bs=(?P<bs>\d+) avail_mem={_NUM} ?GB\)"
)
_SGLANG_CAPTURE_END = re.compile(
    rf"Capture (?:cuda graph|(?P<target>[\w ]+?) CUDA graph) end\..*?"
    rf"(?:Time elapsed: |elapsed=){_NUM} s[.,] mem usage={_NUM} GB"
)
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
# The arguments a deployment set, as vLLM's API server records them at start-up: V1's
# ``non-default args: {..., 'max_num_batched_tokens': 4096, ...}`` (a dict's repr), V0's
# and early V1's ``args: Namespace(..., max_num_batched_tokens=4096, ...)``. The budget is
# there only where it was set (``=None`` is no budget); vLLM 0.32 on CPU logs no "Chunked
# prefill is enabled" line at all, set or not, so this line is its only word on it.
_ARGS_BUDGET = re.compile(
    r"(?:non-default args: \{|args: Namespace\().*?\bmax_num_batched_tokens(?:': |=)(\d+)"
)
_KV_MEMORY = re.compile(rf"Available KV cache memory: {_NUM} GiB")
_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(rf"Maximum concurrency for ([\d,]+) tokens per request: {_NUM}x")
_MODEL_LOADING = re.compile(rf"Model loading took {_NUM} GiB")
_SGLANG_BUDGET = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    rf"max_running_requests=(\d+), context_len=(\d+)(?:, available_gpu_mem={_NUM} GB)?"
)
_PREEMPTED = re.compile(
    r"Sequence group (?P<seq>\S+) is preempted (?:by|in) (?:PreemptionMode\.)?"
    r"(?P<mode>RECOMPUTE|SWAP)\b(?:.*?total_(?:num_)?cumulative_preemption(?:_cnt)? ?= ?"
    r"(?P<total>\d+))?"
)
# SGLang's retraction, both wordings (0.1.x-0.4: "decode out of memory happened").
_RETRACT = re.compile(
    r"(?:KV cache pool is full\. Retract requests\.|[Dd]ecode out of memory happened[.,])"
    r" #retracted_reqs: (\d+)(?:, #new_tokens_gained: (\d+))?"
    rf"(?:, #new_token_ratio: {_NUM} -> {_NUM})?"
)
_OOM = re.compile(
    r"(?P<cuda>\bOutOfMemoryError\b|CUDA out of memory|HIP out of memory"
    r"|(?:CUDA|HIP|cuda|hip)(?: driver)? error: out of memory|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED)"
    r"|(?P<pool>\b(?:Prefill|Decode) out of memory(?! happened)"
    r"|Not enough memory\. Please try to increase --mem-fraction-static)"
)
_TRIED = re.compile(rf"Tried to allocate {_NUM} ?(GiB|MiB|KiB|GB|MB)")
_STARTUP_MEMORY = re.compile(
    r"No available memory for the cache blocks|larger than the available KV cache memory"
    r"|insufficient (?:GPU )?memory|Free memory on device .*? is less than desired GPU memory"
)
# A new process or engine begins (its warm-up captures are still to come): vLLM's API
# server banner and its engine's config line (V1 "a V1 LLM engine", V0 "an LLM engine"),
# SGLang's ``server_args=ServerArgs(...)`` and its scheduler's first memory line.
_SERVER_START = re.compile(
    r"vLLM API server version (\S+)"
    r"|Initializing an? (?:V1 )?LLM engine (?:\(v?(\S+?)\) )?with config"
    r"|server_args=ServerArgs\(|^Load weight begin\b"
)
# Warm-up is over. vLLM logs "Starting vLLM API server [N] on ADDR" inside
# build_async_engine_client, after the engine (and its captures) is built; uvicorn's
# "Application startup complete." follows it.
_READY = re.compile(
    r"Application startup complete\.|The server is fired up and ready to roll!"
    rf"|init engine \(profile, create kv cache, warmup model\) took {_NUM} s"
    r"|Starting vLLM API server (?:\d+ )?on "
)
# Lines of one failure (a traceback, its chained and re-raised exceptions, the other
# processes' reports) come within moments; a later OOM is a failure of its own.
OOM_CASCADE_S = 30.0
# Events that are not signs of a working engine: they do not end an open failure.
_FAILURE_KINDS = frozenset(
    {"cuda_oom", "cuda_oom_reraised", "engine_died", "startup_memory_error", UNRECOGNISED,
     "line_truncated"}
)  # fmt: skip
_DIED = re.compile(
    r"Engine core proc \S+ died unexpectedly|(?:Async)?EngineDeadError"
    r"|EngineCore (?:encountered a fatal error|failed\b)|Engine core initialization failed"
    r"|Engine process failed to start|Engine background task failed"
    r"|AsyncLLM output_handler failed|Background loop (?:has errored|is not running)"
    r"|Writing input of failed execution"
    r"|\b\w+ hit an exception"
    r"|Received sigquit from a child process|Initialization failed\. warmup error"
)
_GC_TOOK = re.compile(
    rf"GC took {_NUM} ?ms to complete\. Collected (\d+|\?) objects(?: \(out of (\d+)\))?"
    r" in GC generation (\d+)"
)
_STATS_HEAD = re.compile(r"^(?:Engine (\d+)|(\d+) Engines Aggregated): ")
_PAIR = re.compile(r"([#A-Za-z][#\w ()/\-]*?): (-?\d+(?:\.\d+)?|True|False)")
_STATS_KEYS = {
    "Avg prompt throughput": "prompt_throughput",
    "Avg generation throughput": "generation_throughput",
    "Running": "running",
    "Waiting": "waiting",
    "Pending": "waiting",
    "Swapped": "swapped",
    "Deferred": "deferred",
    "Preemptions": "preemptions",
    "CPU KV cache usage": "cpu_kv_cache_usage_pct",
    "Prefix cache hit rate": "prefix_cache_hit_rate_pct",
    "External prefix cache hit rate": "external_prefix_cache_hit_rate_pct",
    "MM cache hit rate": "mm_cache_hit_rate_pct",
}
# SGLang scheduler lines in every era: 0.1.x "new fill batch." and the bare decode status
# "#running-req: ..., token usage: ...", then "Prefill batch." / "Decode batch." and, from
# 2025, "Prefill batch," / "Decode batch,".
_BATCH = re.compile(
    r"^(?:(?P<phase>new fill batch|Prefill batch|Decode batch|Prefill|Decode)[.,] "
    r"|(?=#running[-_]req: ))"
)
_BATCH_KEYS = {
    "#running-req": "running",
    "#running_req": "running",
    "#queue-req": "waiting",
    "#queue_req": "waiting",
    "#remaining_req": "waiting",
    "token usage": "kv_cache_usage",
    "full token usage": "kv_cache_usage",
    "swa token usage": "swa_kv_cache_usage",
    "gen throughput (token/s)": "generation_throughput",
    "input throughput (token/s)": "prompt_throughput",
    "tree_cache_hit_rate": "prefix_cache_hit_rate_pct",
}
# A stats or batch record ends on a value; anything else was cut by a viewer's wrap.
_COMPLETE_END = re.compile(r"(?:\d%?|True|False|reqs|tokens/s|\))[.,]?\s*$")
# Traceback frames, source echo and caret markers: never events, never "unrecognised".
# Python's chaining banners join two tracebacks of one failure; they are no event either.
_ECHO = re.compile(
    r"(?: {4}|\t)|\s*(?:File \"|[\^~]+\s*$|\.\.\.<\d+ lines>\.\.\."
    r"|During handling of the above exception, another exception occurred:"
    r"|The above exception was the direct cause of the following exception:)"
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_ERRORISH = re.compile(
    r"out of memory|\bOOM\b|Traceback|\bfail(?:ed|ure|s)?\b|\berror\b|\w+Error\b"
    r"|\bexception\b|\bfatal\b|segmentation fault|core dumped|\bkilled\b|\bpanic",
    re.IGNORECASE,
)
_ERROR_LEVELS = frozenset({"ERROR", "CRITICAL", "FATAL"})


@dataclass(frozen=True, slots=True)
class LogEvent:
    kind: str
    line_no: int
    timestamp: datetime | None
    level: str | None
    process: str | None
    values: Mapping[str, float | str | bool]
    text: str
    received_at: datetime | None = None  # the collector's stamp (container runtime), UTC


@dataclass(frozen=True, slots=True)
class FollowerState:
    carry: bytes = b""
    line_no: int = 0
    discarding: bool = False
    started: bool = False
    warm: bool = False
    capturing: bool = False
    held: str = ""  # a stats/batch record a viewer's wrap cut, waiting for its rest
    held_line_no: int = 0
    traceback: str = ""  # a "Traceback" header whose final exception line is not read yet
    booting: bool = False  # a start banner was read and warm-up has not ended yet
    failure: str = ""  # the open failure's OOM ("where|tried_gib"): re-raises repeat it
    failure_line: int = 0  # where that OOM was counted
    failure_at: datetime | None = None  # the failure's latest stamped line
    flavour: str = ""  # a LOG_FLAVOURS key: the engine whose format the log was read in
    reports_preemptions: bool = False  # V1 stats lines carry "Preemptions:" (>= 0.12)


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _stats(msg: str) -> dict[str, float | str | bool] | None:
    head = _STATS_HEAD.match(msg)
    if head is None and not msg.startswith("Avg prompt throughput:"):
        return None
    values: dict[str, float | str | bool] = {}
    if head is not None:
        values["shape"] = "v1"
        if head.group(1) is not None:
            values["engine"] = float(head.group(1))
        else:
            values["engines_aggregated"] = float(head.group(2))
    else:
        values["shape"] = "v0" if "Swapped:" in msg else "v1"
    for key, value in _PAIR.findall(msg):
        key = key.strip()
        if key.endswith("KV cache usage") and not key.startswith("CPU"):
            values["kv_cache_usage_pct"] = float(value)
        elif key in _STATS_KEYS:
            values[_STATS_KEYS[key]] = float(value)
    return values


def _batch(msg: str) -> dict[str, float | str | bool] | None:
    found = _BATCH.match(msg)
    if found is None:
        return None
    phase = found["phase"] or "decode"
    values: dict[str, float | str | bool] = {
        "phase": "prefill" if phase == "new fill batch" else phase.split(" ", 1)[0].lower()
    }
    for key, value in _PAIR.findall(msg):
        key = key.strip()
        parsed = value == "True" if value in ("True", "False") else float(value)
        values[key] = parsed
        if key in _BATCH_KEYS:
            values[_BATCH_KEYS[key]] = parsed
    return values


Values = dict[str, float | str | bool]
Found = list[tuple[str, Values]]


def _chunked(found: re.Match[str], msg: str) -> Found:
    return [("chunked_prefill", {"max_num_batched_tokens": _num(found[1])})]


def _args_budget(found: re.Match[str], msg: str) -> Found:
    return [("engine_args", {"max_num_batched_tokens": _num(found[1])})]


def _kv_memory(found: re.Match[str], msg: str) -> Found:
    return [("kv_cache_memory", {"gib": float(found[1])})]


def _concurrency(found: re.Match[str], msg: str) -> Found:
    return [("max_concurrency", {"tokens_per_request": _num(found[1]), "factor": float(found[2])})]


def _kv_tokens(found: re.Match[str], msg: str) -> Found:
    out: Found = [("kv_cache_tokens", {"tokens": _num(found[1])})]
    if (conc := _CONCURRENCY.search(msg)) is not None:  # 0.33 merges both lines
        out += _concurrency(conc, msg)
    return out


def _model_loading(found: re.Match[str], msg: str) -> Found:
    return [("model_loading", {"gib": float(found[1])})]


_SGLANG_BUDGET_NAMES = (
    "max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens",
    "max_running_requests", "context_len", "available_gpu_mem_gb",
)  # fmt: skip


def _sglang_budget(found: re.Match[str], msg: str) -> Found:
    pairs = zip(_SGLANG_BUDGET_NAMES, found.groups(), strict=True)
    return [("sglang_budget", {n: float(v) for n, v in pairs if v})]


def _preempted(found: re.Match[str], msg: str) -> Found:
    values: Values = {"mode": found["mode"]}
    if found["total"]:
        values["cumulative"] = float(found["total"])
    return [("preemption", values)]


def _retracted(found: re.Match[str], msg: str) -> Found:
    values: Values = {"retracted_reqs": float(found[1])}
    if found[3]:
        values |= {"new_token_ratio_before": float(found[3])}
        values |= {"new_token_ratio_after": float(found[4])}
    return [("kv_retraction", values)]


@dataclass(frozen=True, slots=True)
class LineRule:
    """One wording of one engine: its pattern and the events a match becomes."""

    pattern: re.Pattern[str]
    events: Callable[[re.Match[str], str], Found]
    claims_flavour: bool = False  # only this engine writes it: the log is in its format


@dataclass(frozen=True, slots=True)
class LogFlavour:
    """One engine's log format: the start-up lines that tell its budget, the lines that
    report a preemption, the periodic step (stats / batch) line, and what that line proves
    about the stream.

    ``key`` is what :attr:`FollowerState.flavour` records once a line of this format was
    read (and what :mod:`probes.parsing.logprefix` calls the engine's head). A new engine
    is one entry in :data:`LOG_FLAVOURS` with its patterns; the reducer looks them up.
    Each group of rules is tried across all flavours at its place in the reducer, in
    table order, and the first match wins.
    """

    key: str
    budget_lines: tuple[LineRule, ...]
    preemption_lines: tuple[LineRule, ...]
    step_event: str  # the event kind of its step line
    parse_step: Callable[[str], Values | None]
    starts_step: Callable[[str], bool]  # a record that may be a (wrapped) step line
    # The stream shows every preemption (a zero count in it is evidence of none).
    shows_every_preemption: Callable[[FollowerState], bool]
    step_counts_preemptions: bool = False  # its step line carries "Preemptions: N" if N > 0


def _oom(msg: str, found: re.Match[str]) -> dict[str, float | str | bool]:
    values: dict[str, float | str | bool] = {"where": "cuda" if found["cuda"] else "kv_pool"}
    if (tried := _TRIED.search(msg)) is not None:
        scale = {"GiB": 1.0, "GB": 1.0, "MiB": 1 / 1024, "MB": 1 / 1024, "KiB": 1 / 1024**2}
        values["tried_gib"] = float(tried[1]) * scale[tried[2]]
    return values


def _oom_event(
    state: FollowerState,
    head: Head,
    line_no: int,
    msg: str,
    found: re.Match[str],
    record: Callable[..., None],
) -> FollowerState:
    """An OOM line: a new failure (``cuda_oom``), or one more line of the failure already
    counted (``cuda_oom_reraised``): the wrapping ``RuntimeError: Worker failed with
    error 'CUDA out of memory ...'``, a chained ``Exception: Capture cuda graph failed:
    ...``, the same OOM reported by another process or rank.

    A line repeats the open failure when nothing since showed the engine working (see
    ``_FAILURE_KINDS``), it came within ``OOM_CASCADE_S`` of the failure's last stamped
    line, and its details do not contradict it (same pool, same requested size where both
    say one).
    """
    values = _oom(msg, found)
    tried = values.get("tried_gib")
    sign = f"{values['where']}|{tried if tried is not None else ''}"
    at = head.timestamp
    same = bool(state.failure)
    if same:
        where, _, size = state.failure.partition("|")
        same = where == values["where"] and (not size or tried is None or size == str(tried))
    if same and at is not None and state.failure_at is not None:
        same = abs((at - state.failure_at).total_seconds()) <= OOM_CASCADE_S
    if same:
        record("cuda_oom_reraised", values | {"of_line": float(state.failure_line)})
        keep = state.failure if tried is None else sign
        return replace(state, failure=keep, failure_at=at or state.failure_at)
    record("cuda_oom", values)
    return replace(state, failure=sign, failure_line=line_no, failure_at=at)


def _vllm_step_starts(msg: str) -> bool:
    return _STATS_HEAD.match(msg) is not None or msg.startswith("Avg prompt throughput:")


def _sglang_step_starts(msg: str) -> bool:
    return _BATCH.match(msg) is not None


LOG_FLAVOURS: tuple[LogFlavour, ...] = (
    LogFlavour(
        key="vllm",
        budget_lines=(
            LineRule(_CHUNKED, _chunked),
            LineRule(_ARGS_BUDGET, _args_budget),
            LineRule(_KV_MEMORY, _kv_memory),
            LineRule(_KV_TOKENS, _kv_tokens),
            LineRule(_CONCURRENCY, _concurrency),
            LineRule(_MODEL_LOADING, _model_loading),
        ),
        # V0's warning (every 50th preemption); V1 logs none.
        preemption_lines=(LineRule(_PREEMPTED, _preempted),),
        step_event="stats",
        parse_step=_stats,
        starts_step=_vllm_step_starts,
        # V0 warns on every 50th preemption, V1 < 0.12 never; V1 >= 0.12 prints
        # "Preemptions: N" on a stats line when N > 0, so only a stream seen doing so.
        shows_every_preemption=lambda state: state.reports_preemptions,
        step_counts_preemptions=True,
    ),
    LogFlavour(
        key="sglang",
        budget_lines=(LineRule(_SGLANG_BUDGET, _sglang_budget),),
        preemption_lines=(LineRule(_RETRACT, _retracted, claims_flavour=True),),
        step_event="sglang_batch",
        parse_step=_batch,
        starts_step=_sglang_step_starts,
        shows_every_preemption=lambda state: state.flavour == "sglang",  # every retraction
    ),
)
_LOG_BY_KEY = {f.key: f for f in LOG_FLAVOURS}


def _is_echo(msg: str) -> bool:
    """A traceback's frame, source or caret line: the exception line says what happened."""
    return _ECHO.match(msg) is not None


def _first_rule(
    msg: str, rules: Callable[[LogFlavour], tuple[LineRule, ...]]
) -> tuple[LogFlavour, LineRule, Found] | None:
    """The first flavour's rule (of one group) that matches, and its events."""
    for fl in LOG_FLAVOURS:
        for rule in rules(fl):
            if (found := rule.pattern.search(msg)) is not None:
                return fl, rule, rule.events(found, msg)
    return None


def _by_rule(
    msg: str,
    state: FollowerState,
    rules: Callable[[LogFlavour], tuple[LineRule, ...]],
    record: Callable[..., None],
) -> FollowerState | None:
    """Record what the first matching rule of the group says; ``None`` when none matched."""
    matched = _first_rule(msg, rules)
    if matched is None:
        return None
    fl, rule, events = matched
    for kind, values in events:
        record(kind, values)
    return replace(state, flavour=fl.key) if rule.claims_flavour else state


def _budget_rules(fl: LogFlavour) -> tuple[LineRule, ...]:
    return fl.budget_lines


def _preemption_rules(fl: LogFlavour) -> tuple[LineRule, ...]:
    return fl.preemption_lines


def _step_line(msg: str, state: FollowerState, record: Callable[..., None]) -> FollowerState:
    """A flavour's periodic step line: the engine is warm, and the log is in its format."""
    for fl in LOG_FLAVOURS:
        if (values := fl.parse_step(msg)) is not None:
            record(fl.step_event, values)
            state = replace(state, warm=True, started=True, booting=False, flavour=fl.key)
            if fl.step_counts_preemptions and "preemptions" in values:
                state = replace(state, reports_preemptions=True)
            return state
    return state


def shows_every_preemption(state: FollowerState, kinds: set[str]) -> bool:
    """Would this stream have shown a preemption (so zero seen is evidence of none)?

    Only once a step line of a flavour whose log prints them all was read this time.
    """
    return any(fl.step_event in kinds and fl.shows_every_preemption(state) for fl in LOG_FLAVOURS)


def parse_line(
    line: str, line_no: int, now: datetime, state: FollowerState
) -> tuple[FollowerState, list[LogEvent]]:
    """One complete record -> events; ``state`` carries warm-up, restart and traceback
    context. ``line`` is one record (see :func:`feed` for glued and wrapped lines)."""
    head = split_record(line, now)
    return _parse_head(head, line, line_no, state)


def _parse_head(
    head: Head, line: str, line_no: int, state: FollowerState
) -> tuple[FollowerState, list[LogEvent]]:
    msg = head.msg
    events: list[LogEvent] = []

    def record(kind: str, values: Mapping[str, float | str | bool], text: str = line) -> None:
        events.append(
            LogEvent(
                kind, line_no, head.timestamp, head.level, head.process,
                MappingProxyType(dict(values)), text[:512], head.received_at,
            )
        )  # fmt: skip

    def emit(kind: str, **values: float | str | bool) -> None:
        record(kind, values)

    if head.flavour in _LOG_BY_KEY and state.flavour != head.flavour:
        state = replace(state, flavour=head.flavour)
    if _is_echo(msg) or not msg.strip():
        return state, events
    msg = msg.strip()
    if (found := _CAPTURE_FINISHED.search(msg)) is not None:
        emit(
            "cuda_graph_capture_finished",
            seconds=float(found[2]),
            gib=float(found[3]),
            encoder=found[1] is not None,
            after_warmup=state.warm,
        )
        state = replace(state, capturing=False)
    elif (found := _SGLANG_CAPTURE_END.search(msg)) is not None:
        emit(
            "cuda_graph_capture_finished",
            seconds=float(found[2]),
            gib=float(found[3]),
            target=found["target"] or "decode",
            after_warmup=state.warm,
        )
        state = replace(state, capturing=False)
    elif (found := _CAPTURE_START.search(msg)) is not None:
        if not state.capturing:  # tqdm redraws the bar; report the capture once
            values: dict[str, float | str | bool] = {
                "mode": found["mode"] or found["target"] or "",
                "after_warmup": state.warm,
            }
            if found["bs"]:
                values |= {"bs": float(found["bs"]), "avail_mem_gb": float(found[4])}
            record("cuda_graph_capture_started", values)
            state = replace(state, capturing=True)
    elif (ruled := _by_rule(msg, state, _budget_rules, record)) is not None or (
        ruled := _by_rule(msg, state, _preemption_rules, record)
    ) is not None:
        state = ruled
    elif (found := _OOM.search(msg)) is not None:
        state = _oom_event(state, head, line_no, msg, found, record)
    elif (found := _DIED.search(msg)) is not None:
        emit("engine_died", reason=found[0])
        # A dead engine captures nothing more: captures from here on are the next
        # engine's warm-up until its ready line.
        state = replace(state, started=True, warm=False, capturing=False, booting=False)
    elif _STARTUP_MEMORY.search(msg) is not None:
        emit("startup_memory_error")
    elif (found := _GC_TOOK.search(msg)) is not None:
        values = {"ms": float(found[1]), "generation": float(found[4])}
        if found[2] != "?":
            values["collected"] = float(found[2])
        if found[3]:
            values["objects"] = float(found[3])
        record("gc_pause", values)
    elif (found := _SERVER_START.search(msg)) is not None:
        # The API server's banner and its engine's config line are one start; a banner
        # after an engine ran (ready, stats, a death) is a restart.
        if state.started and not state.booting:
            emit("restart")
        if not state.booting:
            emit("server_start", version=found[1] or found[2] or "")
        else:
            emit("engine_start", version=found[1] or found[2] or "")
        state = replace(state, started=True, warm=False, capturing=False, booting=True)
    elif (found := _READY.search(msg)) is not None:
        emit("engine_ready")
        state = replace(state, warm=True, started=True, booting=False)
    else:
        state = _step_line(msg, state, record)
    if state.failure and any(e.kind not in _FAILURE_KINDS for e in events):
        state = replace(state, failure="", failure_line=0, failure_at=None)  # it lives again
    if state.traceback and not _TRACEBACK.search(msg):
        # The first line after a traceback's frames is its exception: a known event
        # explains the traceback, anything else leaves it unrecognised.
        if not events:
            record(UNRECOGNISED, {}, text=state.traceback)
        state = replace(state, traceback="")
    if events:
        return state, events
    if _TRACEBACK.search(msg):
        return replace(state, traceback=line[:512]), events
    if head.level in _ERROR_LEVELS or _ERRORISH.search(msg):
        emit(UNRECOGNISED)
    return state, events


def _known(events: list[LogEvent]) -> bool:
    return any(e.kind != UNRECOGNISED for e in events)


def _may_be_wrapped(head: Head, line: str, max_line: int) -> bool:
    """A prefixed stats or batch record that does not end on a value: a viewer's hard
    wrap cut it, and its rest is the next physical line."""
    return (
        head.prefixed
        and len(line) < max_line
        and any(fl.starts_step(head.msg) for fl in LOG_FLAVOURS)
        and _COMPLETE_END.search(head.msg) is None
    )  # fmt: skip


def _continues(line: str, now: datetime, state: FollowerState) -> bool:
    """Could this physical line be the rest of a wrapped record? Only when it cannot be a
    record of its own: no prefix, no indentation, no event when read alone."""
    if not line or line[:2].isspace() or len(line) - len(line.lstrip()) > 1:
        return False
    head = split_record(line, now)
    if head.prefixed:
        return False
    _, alone = _parse_head(head, line, 0, replace(state, traceback=""))
    return not _known(alone)


def _record(
    state: FollowerState, text: str, line_no: int, now: datetime, max_line: int
) -> tuple[FollowerState, list[LogEvent]]:
    """One record, after glued records were cut apart: held back if it may be wrapped."""
    events: list[LogEvent] = []
    if state.held:
        held, held_no = state.held, state.held_line_no
        state = replace(state, held="", held_line_no=0)
        if _continues(text, now, state):
            return _record(state, held + text, held_no, now, max_line)
        state, events = parse_line(held, held_no, now, state)
    head = split_record(text, now)
    if _may_be_wrapped(head, text, max_line):
        return replace(state, held=text, held_line_no=line_no), events
    state, found = _parse_head(head, text, line_no, state)
    return state, events + found


def _flush(state: FollowerState, now: datetime) -> tuple[FollowerState, list[LogEvent]]:
    """End of the log: a held record is read alone, an open traceback stays unexplained."""
    events: list[LogEvent] = []
    if state.held:
        held, held_no = state.held, state.held_line_no
        state, events = parse_line(held, held_no, now, replace(state, held="", held_line_no=0))
    if state.traceback:
        events.append(
            LogEvent(
                UNRECOGNISED, state.line_no, None, None, None, MappingProxyType({}),
                state.traceback,
            )
        )  # fmt: skip
        state = replace(state, traceback="")
    return state, events


def _physical_line(
    state: FollowerState, text: str, line_no: int, now: datetime, max_line: int
) -> tuple[FollowerState, list[LogEvent]]:
    events: list[LogEvent] = []
    for record in split_glued(text, now):
        state, found = _record(state, record, line_no, now, max_line)
        events.extend(found)
    return state, events


def _truncated(line_no: int, size: int, text: str) -> LogEvent:
    values = MappingProxyType({"bytes": float(size)})
    return LogEvent("line_truncated", line_no, None, None, None, values, text[:512])


def feed(
    state: FollowerState,
    chunk: bytes,
    now: datetime,
    *,
    final: bool = False,
    max_line: int = MAX_LINE,
) -> tuple[FollowerState, tuple[LogEvent, ...]]:
    """Consume one chunk; return the new state (holding the partial last line) and events.

    ``\\r`` counts as a line end so tqdm redraws are separate lines. Invalid UTF-8 is
    replaced (U+FFFD), never fatal: a log is evidence even when a process wrote garbage.
    ``final`` ends the log: the partial line, a held wrapped record and an open traceback
    are settled.
    """
    discarding = state.discarding
    if discarding:  # still inside a line already reported as truncated
        end = _LINE_END.search(chunk)
        if end is None:
            if final:
                state, flushed = _flush(replace(state, discarding=False), now)
                return state, tuple(flushed)
            return state, ()
        chunk, discarding = chunk[end.end() :], False
    data = state.carry + chunk
    pieces = _LINE_END.split(data)
    carry = b"" if final else pieces.pop()
    events: list[LogEvent] = []
    line_no = state.line_no
    for raw in pieces:
        line_no += 1
        text = raw[:max_line].decode("utf-8", errors="replace")
        if len(raw) > max_line:
            events.append(_truncated(line_no, len(raw), text))
        state, found = _physical_line(state, text, line_no, now, max_line)
        events.extend(found)
    if len(carry) > max_line:
        # Keep the head for parsing once the line ends; drop the rest as it streams in.
        line_no += 1
        text = carry[:max_line].decode("utf-8", errors="replace")
        events.append(_truncated(line_no, len(carry), text))
        state, found = _physical_line(state, text, line_no, now, max_line)
        events.extend(found)
        carry, discarding = b"", True
    state = replace(state, carry=carry, line_no=line_no, discarding=discarding)
    if final:
        state, found = _flush(state, now)
        events.extend(found)
    return state, tuple(events)


def parse_log(
    data: bytes | str, now: datetime, *, max_line: int = MAX_LINE
) -> tuple[LogEvent, ...]:
    """A whole log at once (``feed`` with ``final=True``)."""
    raw = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
    return feed(FollowerState(), raw, now, final=True, max_line=max_line)[1]


class LogFollower:
    """Convenience holder for :func:`feed` state between polls of one log stream."""

    def __init__(self, now: datetime, max_line: int = MAX_LINE) -> None:
        self.state = FollowerState()
        self.now = now
        self.max_line = max_line

    def feed(self, chunk: bytes, *, final: bool = False) -> tuple[LogEvent, ...]:
        self.state, events = feed(self.state, chunk, self.now, final=final, max_line=self.max_line)
        return events
