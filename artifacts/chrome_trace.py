"""Streaming reader for torch.profiler (Kineto) Chrome traces, bounded in memory and time.

Why streaming: real traces reach millions of events (hundreds of MB of JSON); loading them
whole, as HTA's default backend does (``json.loads`` + a DataFrame row per event), costs
~1.2 KB of RSS per event. Here the bytes come through ``artifacts.bounded.stream`` (size,
gzip-bomb and truncation caps), are decoded as strict UTF-8 incrementally, and the
``traceEvents`` array is walked one event at a time with ``json.JSONDecoder.raw_decode``
(C speed per event). Only what the analyses need is kept, in compact columns:

* GPU activities (``kernel``/``gpu_memcpy``/``gpu_memset``, incl. the 2021 capitalised
  ``Kernel``/``Memcpy``/``Memset``): ts, dur, interned name, kind, device, stream, correlation;
* launch-type runtime calls (``cuda*LaunchKernel*``, ``cudaGraphLaunch``/``hipGraphLaunch``,
  memcpy/memset calls): ts, dur, correlation, thread; every other runtime call is summed
  per name;
* ``ProfilerStep#N`` spans, engine step annotations (vLLM ``execute_new_{n}_cached_{m}``,
  SGLang ``step[EXTEND ...]``/``step[DECODE ...]``, TraceLens ``execute_N_context_...``);
* the K longest CPU ops (a heap), NCCL collective arguments aggregated per collective,
  ``[memory]`` instant peaks, process/thread names.

``python_function`` events, flows, most instants and metadata are counted and dropped at
once. Memory therefore grows with the number of GPU activities and launches (~60 bytes
each), not with the JSON size, and everything else is O(1); ``TraceLimits`` caps even that.

Every way a file can be wrong ends as ``ArtifactRejected`` with one precise line: invalid
UTF-8 (with its byte offset), truncation (JSON or gzip), a number too long for Python's
int conversion, nesting deeper than the C decoder's recursion limit, an oversized event,
or JSON that is not a Kineto trace (a list, an object without ``traceEvents``, the
``export_memory_timeline`` raw file, a pickle).
"""

from __future__ import annotations

import codecs
import heapq
import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from artifacts.bounded import DEFAULT_LIMITS, Deadline, Limits, stream
from artifacts.errors import ArtifactRejected

MiB = 1 << 20

# Kind of a GPU activity, following HTA's kernel types (hta/common/types.py, utils.py).
COMPUTE, COMMUNICATION, MEMORY, OTHER = 0, 1, 2, 3
KIND_NAMES = ("computation", "communication", "memory", "other")

# Kind of a kept runtime call.
LAUNCH_KERNEL, LAUNCH_GRAPH, LAUNCH_MEMORY = 0, 1, 2

_COMM_RE = re.compile(r"^nccl|^hip|^hccl|ncclKernel")
_MEM_RE = re.compile(r"^(?:hip)?Memcpy|^(?:hip)?Memset|^dma")
_NON_COMPUTE_RE = re.compile(r"Sync$|^Stream Wait Event|LaunchKernel")

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# The engines' step annotations: owned here, where the loader keeps the spans they name;
# ``trace_analysis.parse_step_annotation`` reads their groups with the same patterns.
VLLM_STEP_RE = re.compile(r"^execute_new_(\d+)_cached_(\d+)$")
TRACELENS_STEP_RE = re.compile(r"^execute_(\d+)_context_(\d+)(?:\(sq(\d+))?.*?_generation_(\d+)")
SGLANG_STEP_RE = re.compile(r"^step\[(EXTEND|DECODE)\b([^\]]*)\]")
_GPU_CATS = {"kernel": COMPUTE, "gpu_memcpy": MEMORY, "gpu_memset": MEMORY}
_CAT_ALIASES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "async": "ac2g",
    "async_cpu_to_gpu": "ac2g",
}
# Top-level keys kept whole (they are small); other scalars are kept, other containers not.
_KEEP_CONTAINERS = ("deviceProperties", "distributedInfo")
_SYNC_NAMES = re.compile(r"Synchronize$")
_WS = re.compile(r"[ \t\n\r]*")
_PADDING = re.compile(r"[ \t\n\r\x00]*")  # after the document: zero padding is harmless
_MAX_CATEGORY_KEYS = 256
_DEADLINE_EVERY = 8192
# Bulk pieces of the traceEvents array: big enough that one msgspec call per piece costs
# nothing per event, small enough that a piece of tiny hostile events (``{}``, ~80 bytes of
# Struct each) stays a few MB.
_PIECE_CHARS = 256 * 1024
_CUT_TRIES = 16
_AFTER_EVENT = re.compile(r"[ \t\n\r]*[,\]]")


@dataclass(frozen=True)
class TraceLimits:
    """What one trace may hold once parsed (the byte caps live in ``bounded.Limits``)."""

    max_event_chars: int = 8 * MiB
    max_top_level_value_chars: int = 64 * MiB
    max_kept_records: int = 20_000_000
    max_unique_names: int = 500_000
    max_name_chars: int = 4096
    max_annotations: int = 2_000_000
    top_cpu_ops: int = 512
    max_thread_names: int = 10_000
    # Whitespace between two tokens (or padding after the document). Real traces indent by a
    # few hundred characters at most; 4 MB of gzip expands to 4 GiB of blanks, which took a
    # worker 62 s to skip on the way to the expansion cap (issue 19, finding 3).
    max_blank_chars: int = 16 * MiB


DEFAULT_TRACE_LIMITS = TraceLimits()


@dataclass
class GpuActivities:
    """Columnar GPU activities; index i across all arrays is one kernel/memcpy/memset."""

    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    name: array = field(default_factory=lambda: array("i"))
    kind: array = field(default_factory=lambda: array("b"))
    device: array = field(default_factory=lambda: array("i"))
    stream: array = field(default_factory=lambda: array("i"))
    corr: array = field(default_factory=lambda: array("q"))
    # Sparse: index of each communication activity that carried "In msg nelems", and it.
    msg_index: array = field(default_factory=lambda: array("q"))
    msg_nelems: array = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.ts)


@dataclass
class Launches:
    """Columnar launch-type runtime calls (kernel, graph, memcpy/memset launches)."""

    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    corr: array = field(default_factory=lambda: array("q"))
    tid: array = field(default_factory=lambda: array("q"))
    kind: array = field(default_factory=lambda: array("b"))

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True)
class Span:
    """A CPU or GPU span kept whole: steps, step annotations, long CPU ops."""

    name: str
    ts: float
    dur: float
    pid: int
    tid: int
    cat: str


@dataclass
class ChromeTrace:
    """What the reader kept of one trace. Times are Kineto microseconds, as in the file."""

    metadata: dict[str, Any]
    events_total: int
    category_counts: dict[str, int]
    phase_counts: dict[str, int]
    dropped_python_function: int
    malformed_events: int
    names: list[str]
    gpu: GpuActivities
    launches: Launches
    steps: list[Span]
    gpu_steps: list[Span]
    step_annotations: list[Span]
    cpu_ops: list[Span]
    runtime_summary: dict[str, list[float]]
    collectives: dict[str, dict[str, Any]]
    memory_instants: dict[str, float]
    thread_names: dict[str, str]
    window: tuple[float, float] | None
    input_bytes: int

    def kept_records(self) -> int:
        return len(self.gpu) + len(self.launches) + len(self.steps) + len(self.step_annotations)


def gpu_kind(name: str) -> int:
    """HTA's kernel type of a GPU activity name (communication, memory, computation, other).

    HTA classifies by name regexes; note that every ``hip*`` name counts as communication
    there, which this keeps so numbers stay comparable with HTA's.
    """
    if _COMM_RE.search(name):
        return COMMUNICATION
    if _MEM_RE.search(name):
        return MEMORY
    if _NON_COMPUTE_RE.search(name):
        return OTHER
    return COMPUTE


def launch_kind(name: str) -> int | None:
    """Which runtime calls put work on the GPU (None: not a launch, only summed)."""
    if "GraphLaunch" in name:
        return LAUNCH_GRAPH
    if "LaunchKernel" in name or "LaunchCooperativeKernel" in name:
        return LAUNCH_KERNEL
    if ("Memcpy" in name or "Memset" in name) and not name.endswith("Synchronize"):
        return LAUNCH_MEMORY
    return None


# --------------------------------------------------------------------------------------
# Text source: strict incremental UTF-8 over bounded byte chunks.


class _Text:
    """A sliding text window over the decoded artifact, refilled on demand."""

    def __init__(self, chunks: Iterator[bytes], max_blank: int = 16 * MiB) -> None:
        self._chunks = chunks
        self.max_blank = max_blank
        self._dec = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.offset = 0  # text offset of buf[0] in the whole decoded document
        self.eof = False
        self.bytes_in = 0

    def _decode(self, data: bytes, final: bool) -> str:
        pending = len(self._dec.getstate()[0])
        try:
            return self._dec.decode(data, final)
        except UnicodeDecodeError as exc:
            offset = self.bytes_in - pending + exc.start
            raise ArtifactRejected(
                f"invalid UTF-8 at byte offset {offset} of the decompressed trace"
            ) from None

    def fill(self) -> bool:
        """Append the next decoded chunk; False once the input is exhausted."""
        while not self.eof:
            chunk = next(self._chunks, None)
            if chunk is None:
                text = self._decode(b"", True)
                self.eof = True
            else:
                text = self._decode(chunk, False)
                self.bytes_in += len(chunk)
            if text:
                self.offset += self.pos
                self.buf = self.buf[self.pos :] + text if self.pos else self.buf + text
                self.pos = 0
                return True
        return False

    def skip_ws(self, blank: re.Pattern[str] = _WS) -> str:
        """Skip whitespace; return the next character ("" at end of input).

        A run longer than ``max_blank`` is refused as soon as it passes the bound: blanks
        are bytes that carry no event, so a file of them must cost a bounded read, not the
        whole expansion cap."""
        start = self.offset + self.pos
        while True:
            self.pos = blank.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.offset + self.pos - start > self.max_blank:
                raise ArtifactRejected(
                    f"more than {self.max_blank // MiB} MiB of blank characters in a row near "
                    f"byte {self.approx_byte()} (padding, not trace data)"
                )
            if not self.fill():
                return ""

    def approx_byte(self) -> int:
        """Byte offset of the current position, exact for ASCII text before it."""
        tail = len(self.buf) - self.pos
        return max(0, self.bytes_in - tail)


_DECODER = json.JSONDecoder(strict=False, parse_constant=lambda _c: None)


_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_NUMBER_PREFIX = re.compile(r"-?[0-9.eE+-]*")


def _ends_early(exc: json.JSONDecodeError) -> bool:
    """At end of input: did the decoder fail because the text stops, not because it is bad?"""
    if exc.msg.startswith("Unterminated string"):
        return True
    rest = exc.doc[exc.pos :].strip()
    return (
        not rest
        or any(lit.startswith(rest) for lit in _LITERALS)
        or _NUMBER_PREFIX.fullmatch(rest) is not None
    )


def _decode_value(t: _Text, limit: int, what: str) -> Any:
    """Decode one JSON value at ``t.pos``, refilling until it is complete.

    An incomplete value at the end of the window is retried only after the window has
    doubled, so a value of n characters costs O(n) decode work, not O(n^2).
    """
    retry_at = 0
    while True:
        avail = len(t.buf) - t.pos
        if avail >= retry_at or t.eof:
            try:
                value, end = _DECODER.raw_decode(t.buf, t.pos)
            except json.JSONDecodeError as exc:
                incomplete = exc.msg.startswith("Unterminated string") or exc.pos >= len(t.buf) - 64
                if t.eof:
                    incomplete = _ends_early(exc)
                if t.eof or not incomplete:
                    if incomplete:
                        raise ArtifactRejected(
                            f"truncated trace: the JSON ends inside {what}"
                        ) from None
                    raise ArtifactRejected(
                        f"invalid JSON in {what} near byte {t.approx_byte()}: {exc.msg}"
                    ) from None
            except RecursionError:
                raise ArtifactRejected(
                    f"{what} is nested too deeply for the JSON decoder"
                ) from None
            except ValueError as exc:  # int() digit limit and friends
                raise ArtifactRejected(
                    f"unreadable number in {what} near byte {t.approx_byte()}: {exc}"
                ) from None
            else:
                if end < len(t.buf) or t.eof:
                    t.pos = end
                    return value
                # A number (or literal) ending exactly at the window edge may continue.
            retry_at = max(2 * avail, avail + 1)
        if avail > limit:
            raise ArtifactRejected(f"{what} is larger than the {limit // MiB} MiB limit")
        if not t.fill():
            continue  # eof now set: the next round decodes finally or rejects


def _expect(t: _Text, chars: str, where: str) -> str:
    c = t.skip_ws()
    if c == "":
        raise ArtifactRejected(f"truncated trace: the JSON ends {where}")
    if c not in chars:
        raise ArtifactRejected(
            f"invalid JSON near byte {t.approx_byte()}: expected {' or '.join(chars)} {where}, "
            f"found {c!r}"
        )
    t.pos += 1
    return c


# --------------------------------------------------------------------------------------
# Event sink: turns decoded events into compact columns.


def _num(v: Any) -> float | None:
    if type(v) is float:
        return v if math.isfinite(v) else None
    if type(v) is int:
        try:
            f = float(v)
        except OverflowError:
            return None
        return f
    if type(v) is str:
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _int(v: Any, default: int = -1) -> int:
    if type(v) is int and -(1 << 63) <= v < (1 << 63):
        return v
    if type(v) is str:
        digits = v.rsplit(" ", 1)[-1]  # 2021 format: tid "stream 7"
        if digits.isdigit() and len(digits) < 19:
            return int(digits)
    return default


_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_INF = math.inf


def _i32(v: int) -> int:
    return v if -(1 << 31) <= v < (1 << 31) else -1


# --------------------------------------------------------------------------------------
# Typed events: what the sink reads of one event, and nothing else.
#
# msgspec decodes a JSON object into these Structs by name and *skips* every other key in C
# without allocating it (``python_function`` stacks, ``grid``/``block`` lists, ``External id``
# ...), which is what makes bulk decoding ~2-5x faster than building every dict
# (json/orjson). The types are ``Any`` so that a value of an unexpected type reaches the
# sink exactly as ``json`` would have given it; where msgspec is stricter than
# ``json.JSONDecoder(strict=False)`` (NaN, 1e999, control characters, lone surrogates,
# non-object ``args``, a non-object event) it raises, and the events in question are read
# by the stdlib path instead, so every value the sink sees is what ``json`` would give.
# ``gc=False``: these hold only JSON values, so they cannot be part of a reference cycle.


class _Args(msgspec.Struct, gc=False):
    device: Any = None
    stream: Any = None
    correlation: Any = None
    collective_name: Any = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    dtype: Any = None
    group_size: Any = msgspec.field(default=None, name="Group size")
    process_group: Any = msgspec.field(default=None, name="Process Group Description")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    # UNSET, not None: a metadata label is ``args.get("name", args.get("labels"))``, where a
    # present ``"name": null`` wins over ``labels``.
    name: Any = msgspec.UNSET
    labels: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    # float | str: msgspec turns JSON integers into the float ``_num`` would give (or
    # refuses the piece where float() would overflow); strings are parsed by ``_num``.
    ts: float | str | None = None
    dur: float | str | None = None
    pid: Any = None
    tid: Any = None
    # None: absent, null or (from the stdlib path) not an object, which the sink treats alike.
    args: _Args | None = None


_ARG_KEYS = {f.encode_name: f.name for f in msgspec.structs.fields(_Args)}


def _event_from_dict(d: dict) -> _Event:
    """The ``_Event`` msgspec would have decoded from this object (stdlib path)."""
    a = d.get("args")
    args = None
    if type(a) is dict:
        args = _Args(**{attr: a[key] for key, attr in _ARG_KEYS.items() if key in a})
    get = d.get
    return _Event(
        ph=get("ph"),
        cat=get("cat"),
        name=get("name"),
        ts=get("ts"),
        dur=get("dur"),
        pid=get("pid"),
        tid=get("tid"),
        args=args,
    )


_PIECE_DECODER = msgspec.json.Decoder(list[_Event])
_PH_CAT = attrgetter("ph", "cat")
# Phases whose events reach Python code (after python_function events are dropped).
_WANTED_PHASES = ("X", "i", "I", "M")
_UNHASHABLE = object()


def _hashable(pair: tuple[Any, Any]) -> tuple[Any, Any]:
    """The pair with an unhashable ph or cat (a list, an object) replaced by a sentinel that
    counts the same way: not a string, so phase "<none>" and category "<non-string>"."""
    ph, cat = pair
    try:
        hash(ph)
    except TypeError:
        ph = _UNHASHABLE
    try:
        hash(cat)
    except TypeError:
        cat = _UNHASHABLE
    return ph, cat


def _norm_cat(cat: Any) -> str:
    """The category an event counts under (aliases of the 2021 format folded)."""
    if type(cat) is str:
        return _CAT_ALIASES.get(cat, cat)
    return "" if cat is None else "<non-string>"


_NO_ARGS = _Args()


class _Sink:
    def __init__(self, limits: TraceLimits) -> None:
        self.lim = limits
        self.events = 0
        self.cats: dict[str, int] = {}
        self.phases: dict[str, int] = {}
        self.py_fn = 0
        self.malformed = 0
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self._kind_of: list[int] = []
        self.gpu = GpuActivities()
        self.launches = Launches()
        self.steps: list[Span] = []
        self.gpu_steps: list[Span] = []
        self.annotations: list[Span] = []
        self._cpu_heap: list[tuple[float, int, Span]] = []
        self._seq = 0
        self.runtime: dict[str, list[float]] = {}
        self.collectives: dict[str, dict[str, Any]] = {}
        self.memory = {"count": 0, "max_total_allocated": 0.0, "max_total_reserved": 0.0}
        self.thread_names: dict[str, str] = {}
        self.window: tuple[float, float] | None = None
        self.kept = 0
        # name -> (launch kind, its runtime summary row): runtime calls repeat few names.
        self._runtime_of: dict[str, tuple[int | None, list[float]]] = {}

    def name_id(self, name: str) -> int:
        i = self._name_ids.get(name)
        if i is None:
            if len(self.names) >= self.lim.max_unique_names:
                return self.name_id("<more names than the limit>")
            if len(name) > self.lim.max_name_chars:
                name = name[: self.lim.max_name_chars]
                return self.name_id(name)
            i = self._name_ids[name] = len(self.names)
            self.names.append(name)
            self._kind_of.append(gpu_kind(name))
        return i

    def _count(self, table: dict[str, int], key: str, k: int = 1) -> None:
        if key in table or len(table) < _MAX_CATEGORY_KEYS:
            table[key] = table.get(key, 0) + k
        else:
            table["<other>"] = table.get("<other>", 0) + k

    def _keep(self) -> None:
        self.kept += 1
        if self.kept > self.lim.max_kept_records:
            self._too_many_kept()

    def _too_many_kept(self) -> None:
        """Past the cap (hot callers count inline and call this)."""
        raise ArtifactRejected(
            f"trace holds more than {self.lim.max_kept_records:,} GPU activities, launches "
            "and steps; split it (e.g. a shorter profiler schedule) and upload the parts"
        )

    def add(self, e: Any) -> None:
        """One event as the stdlib decoder gave it (any JSON value)."""
        if type(e) is dict:
            self.add_many((_event_from_dict(e),))
        else:
            self.events += 1
            self.malformed += 1

    def add_many(self, events: list[_Event] | tuple[_Event, ...]) -> None:
        """Typed events in file order.

        Counting and dropping happen in C: the (ph, cat) pairs of the piece are counted with
        a ``Counter`` (first-appearance order, so the category cap keeps the same keys as
        counting one event at a time), and only the events of pairs the analyses need reach
        Python code, still in file order (names are interned in order of appearance).
        """
        self.events += len(events)
        pairs = list(map(_PH_CAT, events))
        try:
            counts = Counter(pairs)
        except TypeError:  # a ph or cat that is a list or an object
            pairs = [_hashable(p) for p in pairs]
            counts = Counter(pairs)
        cats = self.cats
        phases = self.phases
        wanted = set()
        for pair, k in counts.items():
            ph, cat = pair
            cat = _norm_cat(cat)
            self._count(cats, cat, k)
            self._count(phases, ph if type(ph) is str else "<none>", k)
            if cat == "python_function":
                self.py_fn += k
            elif ph in _WANTED_PHASES:
                wanted.add(pair)
        if not wanted:
            return
        if len(wanted) < len(counts):
            events = list(compress(events, map(wanted.__contains__, pairs)))
        complete = self._complete
        aliases = _CAT_ALIASES
        for e in events:
            ph = e.ph
            if ph == "X":
                cat = e.cat  # _norm_cat, its common case inlined
                complete(e, aliases.get(cat, cat) if type(cat) is str else _norm_cat(cat))
            elif ph == "M":
                self._meta(e)
            elif e.name == "[memory]":  # "i" or "I"
                self._memory(e.args)

    def _complete(self, e: _Event, cat: str) -> None:
        # Inlined common case of _num: a finite float (all msgspec gives; the stdlib path
        # may give anything, inf and nan included).
        ts = e.ts
        if type(ts) is not float or not -_INF < ts < _INF:
            ts = _num(ts)
        dur = e.dur
        if type(dur) is not float or not -_INF < dur < _INF:
            dur = _num(dur)
        name = e.name
        if ts is None or dur is None or type(name) is not str:
            self.malformed += 1
            return
        if dur < 0:
            dur = 0.0
        if cat in _GPU_CATS:
            self._gpu(e, ts, dur, name)
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            self._runtime(e, ts, dur, name)
        elif cat == "cpu_op" or cat == "user_annotation":
            self._cpu(e, ts, dur, name, cat)
        elif cat == "gpu_user_annotation":
            if _STEP_RE.match(name):
                self._span(self.gpu_steps, e, ts, dur, name, cat)
        elif cat == "Trace":
            self.window = (ts, dur)

    def _gpu(self, e: _Event, ts: float, dur: float, name: str) -> None:
        args = e.args or _NO_ARGS
        nid = self._name_ids.get(name)
        if nid is None:
            nid = self.name_id(name)
        kind = self._kind_of[nid]
        g = self.gpu
        g.ts.append(ts)
        g.dur.append(dur)
        g.name.append(nid)
        g.kind.append(kind)
        # Inlined common case of _i32(_int(v, default)): a plain int that fits.
        v = args.device
        if type(v) is not int or not _I32_MIN <= v <= _I32_MAX:
            v = _i32(_int(v, _int(e.pid)))
        g.device.append(v)
        v = args.stream
        if type(v) is not int or not _I32_MIN <= v <= _I32_MAX:
            v = _i32(_int(v, _int(e.tid)))
        g.stream.append(v)
        v = args.correlation
        if type(v) is not int or not _I64_MIN <= v <= _I64_MAX:
            v = _int(v)
        g.corr.append(v)
        self.kept += 1
        if self.kept > self.lim.max_kept_records:
            self._too_many_kept()
        if kind == COMMUNICATION:
            nelems = self._collective(name, dur, args)
            if nelems > 0:
                g.msg_index.append(len(g.ts) - 1)
                g.msg_nelems.append(nelems)

    def _collective(self, name: str, dur: float, args: _Args) -> int:
        coll = args.collective_name
        if type(coll) is not str:
            coll = _collective_from_kernel(name)
        key = coll[:64]
        c = self.collectives.get(key)
        if c is None:
            if len(self.collectives) >= 256:
                key = "<other>"
                c = self.collectives.get(key)
            if c is None:
                c = self.collectives[key] = {
                    "count": 0,
                    "total_us": 0.0,
                    "max_us": 0.0,
                    "in_nelems_total": 0,
                    "dtype": None,
                    "group_size": None,
                    "process_group": None,
                }
        c["count"] += 1
        c["total_us"] += dur
        c["max_us"] = max(c["max_us"], dur)
        nelems = _int(args.in_msg_nelems, 0)
        if nelems > 0:
            c["in_nelems_total"] += nelems
        for v, key_out in (
            (args.dtype, "dtype"),
            (args.group_size, "group_size"),
            (args.process_group, "process_group"),
        ):
            if c[key_out] is None and type(v) in (str, int):
                c[key_out] = v if type(v) is int else v[:64]
        return nelems

    def _runtime(self, e: _Event, ts: float, dur: float, name: str) -> None:
        known = self._runtime_of.get(name)
        if known is None:
            r = self.runtime.get(key := self.names[self.name_id(name)])
            if r is None:
                r = self.runtime[key] = [0, 0.0, 0.0]
            known = (launch_kind(name), r)
            if len(self._runtime_of) < self.lim.max_unique_names:
                self._runtime_of[name] = known
        kind, r = known
        if kind is not None:
            args = e.args
            corr = _int(args.correlation) if args is not None else -1
            lc = self.launches
            lc.ts.append(ts)
            lc.dur.append(dur)
            lc.corr.append(corr)
            tid = e.tid
            lc.tid.append(tid if type(tid) is int and _I64_MIN <= tid <= _I64_MAX else _int(tid))
            lc.kind.append(kind)
            self.kept += 1
            if self.kept > self.lim.max_kept_records:
                self._too_many_kept()
        r[0] += 1
        r[1] += dur
        if dur > r[2]:
            r[2] = dur

    def _span(
        self, target: list[Span], e: _Event, ts: float, dur: float, name: str, cat: str
    ) -> None:
        if len(target) >= self.lim.max_annotations:
            raise ArtifactRejected(
                f"trace holds more than {self.lim.max_annotations:,} step annotations"
            )
        target.append(Span(name, ts, dur, _int(e.pid), _int(e.tid), cat))
        self._keep()

    def _cpu(self, e: _Event, ts: float, dur: float, name: str, cat: str) -> None:
        c0 = name[:1]
        if c0 == "P" and _STEP_RE.match(name):
            self._span(self.steps, e, ts, dur, name, cat)
            return
        if (c0 == "e" and name.startswith("execute_")) or (c0 == "s" and name.startswith("step[")):
            if VLLM_STEP_RE.match(name) or TRACELENS_STEP_RE.match(name):
                self._span(self.annotations, e, ts, dur, name[:512], cat)
                return
            if SGLANG_STEP_RE.match(name):
                self._span(self.annotations, e, ts, dur, name[:512], cat)
                return
        heap = self._cpu_heap
        if len(heap) < self.lim.top_cpu_ops or dur > heap[0][0]:
            self._seq += 1
            span = Span(self.names[self.name_id(name)], ts, dur, _int(e.pid), _int(e.tid), cat)
            if len(heap) < self.lim.top_cpu_ops:
                heapq.heappush(heap, (dur, self._seq, span))
            else:
                heapq.heapreplace(heap, (dur, self._seq, span))

    def _memory(self, args: _Args | None) -> None:
        if args is None:
            return
        m = self.memory
        m["count"] += 1
        for v, key_out in (
            (args.total_allocated, "max_total_allocated"),
            (args.total_reserved, "max_total_reserved"),
        ):
            f = _num(v)
            if f is not None and f > m[key_out]:
                m[key_out] = f

    def _meta(self, e: _Event) -> None:
        name = e.name
        args = e.args
        if name not in ("thread_name", "process_name", "process_labels") or args is None:
            return
        label = args.labels if args.name is msgspec.UNSET else args.name
        if type(label) is not str or len(self.thread_names) >= self.lim.max_thread_names:
            return
        key = f"{name}:{e.pid}:{e.tid}"[:128]
        self.thread_names[key] = label[:256]

    def cpu_ops(self) -> list[Span]:
        return [s for _d, _q, s in sorted(self._cpu_heap, reverse=True)]


def _collective_from_kernel(name: str) -> str:
    """``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)`` -> ``AllReduce``."""
    m = re.match(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", name)
    if m:
        return m.group(1)
    return name.split("(", 1)[0][:64]


# --------------------------------------------------------------------------------------
# Document walk.


def _classify_top_level_array(t: _Text, limits: TraceLimits) -> str:
    """Why a top-level JSON array is not a trace, as precisely as its first element allows."""
    t.pos += 1
    c = t.skip_ws()
    if c == "]":
        return "the file is an empty JSON array, not a Chrome trace"
    if c == "":
        return "truncated file: a JSON array that ends after '['"
    first = _decode_value(t, limits.max_event_chars, "the first array element")
    if isinstance(first, list) and len(first) == 4 and all(type(x) in (int, float) for x in first):
        return (
            "this is torch.profiler export_memory_timeline raw output (a JSON list of "
            "[timestamp, action, bytes, category] rows), not a Chrome trace; upload the "
            "profiler's .pt.trace.json(.gz) instead"
        )
    if isinstance(first, dict) and "ph" in first:
        return (
            "a bare JSON array of trace events (Chrome 'JSON Array Format'); torch.profiler "
            "writes an object with a traceEvents array, which is what Atlas reads"
        )
    return f"the file is a JSON array of {type(first).__name__}, not a Chrome trace object"


def _find_cut(buf: str, start: int, end: int) -> int:
    """Index of a ``}`` in ``buf[start:end]`` that is followed by ``,`` or ``]`` (-1: none).

    A candidate only: the ``}`` may sit inside a string or a nested object. That is safe
    because a piece ``[`` + text + ``]`` that is a prefix of a valid array cut anywhere but
    between two elements is never valid JSON, so a wrong cut fails to decode and the piece
    is read by the stdlib path instead.
    """
    for _ in range(_CUT_TRIES):
        cut = buf.rfind("}", start, end)
        if cut < 0:
            return -1
        if _AFTER_EVENT.match(buf, cut + 1):
            return cut
        end = cut
    return -1


def _read_events(t: _Text, sink: _Sink, limits: TraceLimits, deadline: Deadline) -> None:
    """Read the traceEvents array: in bulk pieces where possible, one event at a time where not.

    Bulk: the window is cut after the last complete-looking event and the piece is decoded
    by msgspec into typed events in one C call (``_PIECE_DECODER``). A piece is at most
    ``max_event_chars`` long, so every event in it is within the per-event limit, and at most
    ``_PIECE_CHARS``, so memory stays flat. When a piece does not decode (a wrong cut, or
    input msgspec is stricter about than ``json``), the events up to its end are read by the
    stdlib path below, which gives exactly the old values, errors and messages; then bulk
    reading resumes.
    """
    c = t.skip_ws()
    if c == "":
        raise ArtifactRejected('truncated trace: the JSON ends after "traceEvents":')
    if c != "[":
        raise ArtifactRejected(f"traceEvents is not an array (found {c!r})")
    t.pos += 1
    if t.skip_ws() == "]":
        t.pos += 1
        return
    add = sink.add
    add_many = sink.add_many
    decode = _PIECE_DECODER.decode
    what = "an event of traceEvents"
    piece_max = min(_PIECE_CHARS, limits.max_event_chars)
    n = 0
    slow_until = -1  # absolute text offset up to which events are read one at a time
    next_check = _DEADLINE_EVERY
    while True:
        if t.offset + t.pos >= slow_until:
            while len(t.buf) - t.pos < piece_max and t.fill():
                pass
            buf = t.buf
            start = t.pos
            cut = _find_cut(buf, start, min(len(buf), start + piece_max))
            if cut >= 0:
                try:
                    events = decode("[" + buf[start : cut + 1] + "]")
                except (msgspec.MsgspecError, RecursionError):
                    slow_until = t.offset + cut + 1
                else:
                    add_many(events)
                    n += len(events)
                    t.pos = cut + 1
                    deadline.check()
                    next_check = n + _DEADLINE_EVERY
                    if _expect(t, ",]", f"inside traceEvents after {n:,} events") == "]":
                        return
                    if t.skip_ws() == "":
                        raise ArtifactRejected(
                            f"truncated trace: the JSON ends inside traceEvents after {n:,} events"
                        )
                    continue
        # One event through the stdlib decoder, straight from the window when it is complete.
        buf = t.buf
        try:
            e, end = _DECODER.raw_decode(buf, t.pos)
        except json.JSONDecodeError:
            e = _decode_value(t, limits.max_event_chars, what)
        except RecursionError:
            raise ArtifactRejected(f"{what} is nested too deeply for the JSON decoder") from None
        except ValueError as exc:
            raise ArtifactRejected(
                f"unreadable number in {what} near byte {t.approx_byte()}: {exc}"
            ) from None
        else:
            if end >= len(buf) and not t.eof and type(e) is not dict:
                e = _decode_value(t, limits.max_event_chars, what)  # may continue
            else:
                t.pos = end
        add(e)
        n += 1
        if n >= next_check:
            deadline.check()
            next_check = n + _DEADLINE_EVERY
        pos = t.pos
        if pos < len(t.buf) and t.buf[pos] == ",":
            t.pos = pos + 1
        elif _expect(t, ",]", f"inside traceEvents after {n:,} events") == "]":
            return
        if t.skip_ws() == "":
            raise ArtifactRejected(
                f"truncated trace: the JSON ends inside traceEvents after {n:,} events"
            )


def _read_document(t: _Text, sink: _Sink, limits: TraceLimits, deadline: Deadline) -> dict:
    c = t.skip_ws()
    if c == "":
        raise ArtifactRejected("file is empty (only whitespace)")
    if c == "\ufeff":  # tolerate a UTF-8 byte-order mark
        t.pos += 1
        c = t.skip_ws()
    if c == "[":
        raise ArtifactRejected(_classify_top_level_array(t, limits))
    if c != "{":
        if c in '"-0123456789tfn':
            raise ArtifactRejected(
                "the file is a JSON scalar, not a Chrome trace object with traceEvents"
            )
        raise ArtifactRejected(
            f"not JSON: the file starts with {t.buf[t.pos : t.pos + 16]!r} "
            "(expected a Chrome trace object)"
        )
    t.pos += 1
    meta: dict[str, Any] = {}
    keys: list[str] = []
    seen_events = False
    if t.skip_ws() == "}":
        t.pos += 1
        raise ArtifactRejected("the file is an empty JSON object: no traceEvents array")
    while True:
        c = t.skip_ws()
        if c == "":
            raise ArtifactRejected("truncated trace: the JSON ends inside the top-level object")
        if c != '"':
            raise ArtifactRejected(
                f"invalid JSON near byte {t.approx_byte()}: expected a key in the top-level "
                f"object, found {c!r}"
            )
        key = _decode_value(t, 4096, "a top-level key")
        _expect(t, ":", f"after the top-level key {key[:40]!r}")
        if key == "traceEvents":
            if seen_events:
                raise ArtifactRejected("traceEvents appears twice in the top-level object")
            seen_events = True
            _read_events(t, sink, limits, deadline)
        else:
            if t.skip_ws() == "":
                raise ArtifactRejected(f"truncated trace: the JSON ends after the key {key[:40]!r}")
            value = _decode_value(
                t, limits.max_top_level_value_chars, f"the top-level value {key[:40]!r}"
            )
            if len(keys) < 200:
                keys.append(key[:100])
            if key in _KEEP_CONTAINERS and isinstance(value, (dict, list)):
                meta[key] = value
            elif isinstance(value, (int, float, bool)) or value is None:
                if len(meta) < 200 and len(key) <= 100:
                    if isinstance(value, int) and abs(value) >= 1 << 63:
                        value = None  # not a Kineto value; keep JSON consumers safe
                    meta[key] = value
            elif isinstance(value, str) and len(meta) < 200 and len(key) <= 100:
                meta[key] = value[:1024]
        c = _expect(t, ",}", "inside the top-level object")
        if c == "}":
            break
    if not seen_events:
        raise ArtifactRejected(
            "a JSON object without a traceEvents array is not a Chrome trace (top-level keys: "
            + ", ".join(keys[:12])
            + ")"
        )
    if t.skip_ws(_PADDING) != "":
        raise ArtifactRejected(
            f"unexpected data after the end of the trace object near byte {t.approx_byte()}"
        )
    meta["top_level_keys"] = keys
    return meta


def _looks_like_pickle(first: bytes) -> bool:
    return len(first) >= 2 and first[0] == 0x80 and 2 <= first[1] <= 5


def _peeked(chunks: Iterator[bytes]) -> Iterator[bytes]:
    first = next(chunks, b"")
    if _looks_like_pickle(first):
        raise ArtifactRejected(
            "this is a Python pickle (a CUDA memory snapshot?), not a Chrome trace"
        )
    if first:
        yield first
    yield from chunks


def load_chrome_trace(
    source: Path | str | BinaryIO,
    limits: Limits = DEFAULT_LIMITS,
    deadline: Deadline | None = None,
    trace_limits: TraceLimits = DEFAULT_TRACE_LIMITS,
) -> ChromeTrace:
    """Stream-read a Kineto Chrome trace (plain or gzipped JSON) into compact columns.

    Raises ``ArtifactRejected`` with one precise reason for anything that is not a
    readable trace; never any other exception for bad input.
    """
    deadline = deadline or Deadline(limits.deadline_s)
    t = _Text(_peeked(stream(source, limits, deadline)), trace_limits.max_blank_chars)
    sink = _Sink(trace_limits)
    meta = _read_document(t, sink, trace_limits, deadline)
    return ChromeTrace(
        metadata=meta,
        events_total=sink.events,
        category_counts=dict(sink.cats),
        phase_counts=dict(sink.phases),
        dropped_python_function=sink.py_fn,
        malformed_events=sink.malformed,
        names=sink.names,
        gpu=sink.gpu,
        launches=sink.launches,
        steps=sink.steps,
        gpu_steps=sink.gpu_steps,
        step_annotations=sink.annotations,
        cpu_ops=sink.cpu_ops(),
        runtime_summary=sink.runtime,
        collectives=sink.collectives,
        memory_instants=dict(sink.memory),
        thread_names=sink.thread_names,
        window=sink.window,
        input_bytes=t.bytes_in,
    )
