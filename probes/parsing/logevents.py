"""Events from vLLM / SGLang engine logs (reference/engine-metrics.md §6, §2.5).

The memory-pressure playbook needs "CUDA graphs captured *after* warm-up" (pool growth
that coincides with reserved-memory steps), startup memory budgets, OOMs, restarts, SGLang
retractions and the periodic stats lines; operators grep for exactly these lines.

Prefix variants handled (message text is matched after the prefix is stripped):

* vLLM >= 0.11: ``(EngineCore_DP0 pid=241) INFO 02-12 19:50:09 [file.py:123] msg``
* vLLM 0.10.x / older V1 without the process prefix: ``INFO 02-12 19:50:09 [file.py:123] msg``
* old V0: ``INFO 05-30 06:41:50 model_runner.py:1562] msg`` (no opening bracket)
* SGLang: ``[2025-01-15 10:23:45 TP0] msg`` / ``[2025-01-15 10:23:45] msg`` (has a year)
* anything else (tqdm bars, tracebacks) is matched as a bare message without a timestamp.

vLLM lines carry no year: it is inferred from ``now`` (a month/day later than now's
belongs to the previous year). :func:`feed` is a pure reducer over byte chunks that may
split lines (and UTF-8 sequences) anywhere; lines longer than ``max_line`` are truncated
and flagged with a ``line_truncated`` event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from types import MappingProxyType

__all__ = [
    "FollowerState",
    "LogEvent",
    "LogFollower",
    "feed",
    "infer_year",
    "parse_line",
    "parse_log",
]

MAX_LINE = 16 * 1024
_LINE_END = re.compile(rb"\r\n|\r|\n")

_VLLM_RE = re.compile(
    r"^(?:\((?P<proc>[^()]{1,64}?) pid=\d+\)\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)"
    r"(?:[.,]\d+)? \[?(?P<src>[^\s\]]+:\d+)\] (?P<msg>.*)$"
)
_SGLANG_RE = re.compile(
    r"^\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?: (?P<proc>[^\]]{1,64}))?\] "
    r"(?P<msg>.*)$"
)

_NUM = r"(\d+(?:\.\d+)?)"
_CAPTURE_FINISHED = re.compile(
    rf"(Encoder )?[Gg]raph capturing finished in {_NUM} secs?, took {_NUM} GiB"
)
_CAPTURE_START = re.compile(
    r"Capturing cudagraphs for decoding|^Capturing CUDA graphs?(?: shapes| \((?P<mode>[^)]*)\))?"
    r"|Capture (?:cuda graph|(?P<target>[\w ]+?) CUDA graph) begin"
)
_SGLANG_CAPTURE_END = re.compile(
    rf"Capture (?:cuda graph|(?P<target>[\w ]+?) CUDA graph) end\..*?"
    rf"(?:Time elapsed: |elapsed=){_NUM} s[.,] mem usage={_NUM} GB"
)
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_KV_MEMORY = re.compile(rf"Available KV cache memory: {_NUM} GiB")
_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(rf"Maximum concurrency for ([\d,]+) tokens per request: {_NUM}x")
_MODEL_LOADING = re.compile(rf"Model loading took {_NUM} GiB")
_SGLANG_BUDGET = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    rf"max_running_requests=(\d+), context_len=(\d+)(?:, available_gpu_mem={_NUM} GB)?"
)
_OOM = re.compile(
    rf"(?:torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory)"
    rf"(?:.*?Tried to allocate {_NUM} (GiB|MiB|KiB))?"
)
_SERVER_START = re.compile(
    r"vLLM API server version (\S+)|Starting vLLM API server|server_args=ServerArgs\("
)
_READY = re.compile(
    r"Application startup complete\.|The server is fired up and ready to roll!"
    rf"|init engine \(profile, create kv cache, warmup model\) took {_NUM} s"
)
_DIED = re.compile(
    r"Engine core proc \S+ died unexpectedly|EngineDeadError|"
    r"EngineCore (?:encountered a fatal error|failed to start)"
)
_RETRACT = re.compile(
    r"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+)"
    rf"(?:, #new_tokens_gained: (\d+))?(?:, #new_token_ratio: {_NUM} -> {_NUM})?"
)
_STATS_HEAD = re.compile(r"^(?:Engine (\d+)|(\d+) Engines Aggregated): ")
_PAIR = re.compile(r"([#A-Za-z][#A-Za-z ()/\-]*?): (-?\d+(?:\.\d+)?|True|False)")
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


@dataclass(frozen=True, slots=True)
class LogEvent:
    kind: str
    line_no: int
    timestamp: datetime | None
    level: str | None
    process: str | None
    values: Mapping[str, float | str | bool]
    text: str


@dataclass(frozen=True, slots=True)
class FollowerState:
    carry: bytes = b""
    line_no: int = 0
    discarding: bool = False
    started: bool = False
    warm: bool = False
    capturing: bool = False


def infer_year(month: int, day: int, now: datetime) -> int:
    """Logs omit the year: a date later in the year than ``now`` is from last year."""
    return now.year - 1 if (month, day) > (now.month, now.day) else now.year


def _timestamp(md: str, hms: str, now: datetime) -> datetime | None:
    month, day = int(md[:2]), int(md[3:])
    year = infer_year(month, day, now)
    for y in range(year, year - 8, -1):  # 02-29 belongs to the latest leap year
        try:
            return datetime.strptime(f"{y}-{md} {hms}", "%Y-%m-%d %H:%M:%S")
        except ValueError:
            if (month, day) != (2, 29):
                return None
    return None


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


def parse_line(
    line: str, line_no: int, now: datetime, state: FollowerState
) -> tuple[FollowerState, list[LogEvent]]:
    """One complete line -> events; ``state`` carries warm-up and restart context."""
    m = _VLLM_RE.match(line)
    ts = level = proc = None
    if m is not None:
        ts, level, proc = _timestamp(m["md"], m["hms"], now), m["level"], m["proc"]
        msg = m["msg"]
    else:
        m = _SGLANG_RE.match(line)
        if m is not None:
            try:
                ts = datetime.strptime(f"{m['date']} {m['hms']}", "%Y-%m-%d %H:%M:%S")
            except ValueError:
                ts = None
            proc, msg = m["proc"], m["msg"]
        else:
            msg = line.strip()
    events: list[LogEvent] = []

    def emit(kind: str, **values: float | str | bool) -> None:
        events.append(
            LogEvent(kind, line_no, ts, level, proc, MappingProxyType(values), line[:512])
        )

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
            emit(
                "cuda_graph_capture_started",
                mode=found["mode"] or found["target"] or "",
                after_warmup=state.warm,
            )
            state = replace(state, capturing=True)
    elif (found := _CHUNKED.search(msg)) is not None:
        emit("chunked_prefill", max_num_batched_tokens=_num(found[1]))
    elif (found := _KV_MEMORY.search(msg)) is not None:
        emit("kv_cache_memory", gib=float(found[1]))
    elif (found := _KV_TOKENS.search(msg)) is not None:
        emit("kv_cache_tokens", tokens=_num(found[1]))
        if (conc := _CONCURRENCY.search(msg)) is not None:  # 0.33 merges both lines
            emit("max_concurrency", tokens_per_request=_num(conc[1]), factor=float(conc[2]))
    elif (found := _CONCURRENCY.search(msg)) is not None:
        emit("max_concurrency", tokens_per_request=_num(found[1]), factor=float(found[2]))
    elif (found := _MODEL_LOADING.search(msg)) is not None:
        emit("model_loading", gib=float(found[1]))
    elif (found := _SGLANG_BUDGET.search(msg)) is not None:
        names: tuple[str, ...] = (
            "max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens",
            "max_running_requests", "context_len", "available_gpu_mem_gb",
        )  # fmt: skip
        emit(
            "sglang_budget",
            **{n: float(v) for n, v in zip(names, found.groups(), strict=True) if v},
        )
    elif (found := _OOM.search(msg)) is not None:
        values: dict[str, float | str | bool] = {}
        if found[1]:
            scale = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2}[found[2]]
            values["tried_gib"] = float(found[1]) * scale
        emit("cuda_oom", **values)
    elif (found := _RETRACT.search(msg)) is not None:
        values = {"retracted_reqs": float(found[1])}
        if found[3]:
            values |= {"new_token_ratio_before": float(found[3])}
            values |= {"new_token_ratio_after": float(found[4])}
        emit("kv_retraction", **values)
    elif (found := _SERVER_START.search(msg)) is not None:
        if state.started:
            emit("restart")
        emit("server_start", version=found[1] or "")
        state = FollowerState(state.carry, state.line_no, state.discarding, True, False, False)
    elif _DIED.search(msg) is not None:
        emit("engine_died")
    elif (found := _READY.search(msg)) is not None:
        emit("engine_ready")
        state = replace(state, warm=True, started=True)
    elif (stats := _stats(msg)) is not None:
        emit("stats", **stats)
        state = replace(state, warm=True)
    elif msg.startswith(("Prefill batch", "Decode batch")):
        values = {"phase": msg.split(" ", 1)[0].lower()}
        for key, value in _PAIR.findall(msg):
            values[key.strip()] = value == "True" if value in ("True", "False") else float(value)
        emit("sglang_batch", **values)
        state = replace(state, warm=True)
    return state, events


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
    """
    discarding = state.discarding
    if discarding:  # still inside a line already reported as truncated
        end = _LINE_END.search(chunk)
        if end is None:
            return state, ()
        chunk, discarding = chunk[end.end() :], False
    data = state.carry + chunk
    pieces = _LINE_END.split(data)
    carry = b"" if final else pieces.pop()
    events: list[LogEvent] = []
    line_no = state.line_no
    for raw in pieces:
        line_no += 1
        truncated = len(raw) > max_line
        text = raw[:max_line].decode("utf-8", errors="replace")
        if truncated:
            events.append(
                LogEvent(
                    "line_truncated", line_no, None, None, None,
                    MappingProxyType({"bytes": float(len(raw))}), text[:512],
                )
            )  # fmt: skip
        state, found = parse_line(text, line_no, now, state)
        events.extend(found)
    if len(carry) > max_line:
        # Keep the head for parsing once the line ends; drop the rest as it streams in.
        line_no += 1
        text = carry[:max_line].decode("utf-8", errors="replace")
        events.append(
            LogEvent(
                "line_truncated", line_no, None, None, None,
                MappingProxyType({"bytes": float(len(carry))}), text[:512],
            )
        )  # fmt: skip
        state, found = parse_line(text, line_no, now, state)
        events.extend(found)
        carry, discarding = b"", True
    return replace(state, carry=carry, line_no=line_no, discarding=discarding), tuple(events)


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
