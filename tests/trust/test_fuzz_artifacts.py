"""Artifact loaders under a fuzzer: real captures from ``shared/samples``, mutated.

Property, for every input: the loader and the analysis behind it either return a stored,
JSON-safe analysis or raise ``ArtifactRejected`` with a reason, within their size and time
bounds. Never another exception (that would surface as a traceback on the artifact page,
or kill the worker task), never a hang. Bytes are mutated at the byte level (most end at
the pre-scan or the JSON reader) and at the data level (valid pickles and JSON with hostile
values in real places, which reach validation and analysis).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import pickle
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from artifacts import kinds, safepickle
from artifacts.analysis import analyse_file
from artifacts.bounded import Deadline, Limits
from artifacts.chrome_trace import load_chrome_trace
from artifacts.errors import ArtifactRejected
from artifacts.gc_log import analyse_gc_log, parse_gc_log
from artifacts.memory_analysis import analyse_snapshot
from artifacts.memory_snapshot import load_snapshot
from tests.support.samples import CHROME_TRACES, MEMORY_SNAPSHOTS
from tests.trust.conftest import (
    accepted_or_rejected,
    fuzz_settings,
    json_values,
    mutated,
    need_samples,
    seed_accepted,
)

MiB = 1 << 20
# Small bounds, so a hostile input meets them quickly instead of costing the test run.
LIMITS = Limits(max_file_bytes=8 * MiB, max_expanded_bytes=32 * MiB, deadline_s=30.0)

SNAPSHOT_SEEDS = (
    "voxelflex_dump_snapshot_no_history.pickle",
    "mlsys_profile_no_grad.pkl",
    "llminf_oom_snapshot_legacy_v2_0.pickle",
    "layoutediting_segments_only_list.pkl",
)
TRACE_SEEDS = (
    "hta_cpu_only_rank34.pt.trace.json.gz",
    "hta_triton_example.json.gz",
    "hta_mi250_rocm.json.gz",
    "mlsys_h100_pinned_streamed_memcpy.json",
)
PICKLE_TOKENS = (
    b"\x80\x02", b"\x80\x05", b"c__builtin__\neval\n", b"\x93", b"R", b"(", b"]", b"}",
    b")", b"e", b"u", b"s", b"a", b"t", b"0", b"1", b"2", b".", b"\x94", b"h\x00",
    b"q\x00", b"j\xff\xff\xff\x7f", b"\x8a\xff", b"\x8b\xff\xff\xff\x7f",
    b"X\xff\xff\xff\x7f", b"\x8e\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"\x95\xff\xff\xff\xff\x00\x00\x00\x00", b"P", b"Q", b"b", b"\x81", b"\x85",
    b"\x88", b"\x89", b"N", b"G\x7f\xf8\x00\x00\x00\x00\x00\x00",
)  # fmt: skip
JSON_TOKENS = (
    b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b"\\u0000", b"\\ud800", b"NaN",
    b"Infinity", b"-Infinity", b"1e999", b"-0", b"null", b"true", b"99999999999999999999",
    b'"traceEvents":', b'"ph":"X"', b'"ph":"i"', b'"dur":-1', b'"ts":1e308', b'"name":',
    b'"args":{}', b'"cat":"kernel"', b'"cat":"gpu_memcpy"', b"\x00", b"\xff", b"\xef\xbb\xbf",
    b"[" * 64, b"{" * 64, b"\x80\x04",
)  # fmt: skip


def _storable(analysis: dict) -> None:
    """What the task stores: JSON without NaN, with the keys the pages read."""
    json.dumps(analysis, allow_nan=False)
    assert isinstance(analysis["findings"], list)
    assert all(math.isfinite(v) for v in analysis["signals"].values())


def _analyse_bytes(data: bytes, kind: str | None, *, seed: bool = False) -> dict | None:
    """The analysis, or None when rejected; an unmutated ``seed`` must be analysed."""
    with tempfile.TemporaryDirectory(prefix="atlas-fuzz-") as folder:
        path = Path(folder) / "artifact"
        path.write_bytes(data)
        analyse = lambda: analyse_file(path, kind, LIMITS)  # noqa: E731
        result = (
            seed_accepted(analyse) if seed else accepted_or_rejected(analyse, (ArtifactRejected,))
        )
    if result is not None:
        _storable(result)
    return result


@cache
def _snapshot_seeds() -> tuple[bytes, ...]:
    paths = [MEMORY_SNAPSHOTS / name for name in SNAPSHOT_SEEDS]
    need_samples(paths)
    return tuple(p.read_bytes() for p in paths)


@cache
def _trace_seeds() -> tuple[bytes, ...]:
    paths = [CHROME_TRACES / name for name in TRACE_SEEDS]
    need_samples(paths)
    out = []
    for p in paths:
        raw = p.read_bytes()
        out.append(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return tuple(out)


def _places(obj: Any, limit: int = 20_000) -> list[tuple[Any, Any]]:
    """(container, key) of every value inside ``obj``, breadth first, up to ``limit``."""
    out: list[tuple[Any, Any]] = []
    queue = [obj]
    while queue and len(out) < limit:
        node = queue.pop(0)
        keys = node.keys() if isinstance(node, dict) else range(len(node))
        for key in keys:
            out.append((node, key))
            if isinstance(node[key], (dict, list)):
                queue.append(node[key])
    return out


HOSTILE_SCALARS = st.sampled_from(
    [-1, 0, 1 << 63, 1 << 64, -(1 << 63), 2.5, math.nan, math.inf, -math.inf, "", "x" * 5000,
     b"\x00\xff", None, True, (), (1, 2), [], {}, "segment_alloc", "oom", "active_allocated"]
)  # fmt: skip


@st.composite
def _data_mutated(
    draw: st.DrawFn, obj: Any, values: st.SearchStrategy[Any], *, share: bool = True
) -> Any:
    """Replace, delete or share (alias, cycle) a few values at real places inside ``obj``."""
    places = _places(obj)
    for _ in range(draw(st.integers(1, 4))):
        if not places:
            break
        container, key = places[draw(st.integers(0, len(places) - 1))]
        try:
            current = container[key]
        except (KeyError, IndexError):
            continue
        op = draw(
            st.sampled_from(("replace", "delete", "share") if share else ("replace", "delete"))
        )
        if op == "delete":
            del container[key]
        elif op == "share" and isinstance(current, (dict, list)):
            # The same object twice (a pickle memo reference), or a cycle back to its parent.
            container[key] = draw(st.sampled_from([container, obj, [current, current]]))
        else:
            container[key] = draw(values)
    return obj


@st.composite
def _snapshot_pickles(draw: st.DrawFn) -> bytes:
    seed = draw(st.sampled_from(_snapshot_seeds()))
    obj = safepickle.loads(seed)
    obj = draw(_data_mutated(obj, HOSTILE_SCALARS | json_values()))
    try:
        return pickle.dumps(obj, protocol=draw(st.integers(2, 5)))
    except RecursionError:
        return seed  # a cycle the pickler cannot write: nothing to test
    # (pickle keeps shared references and cycles through its memo, as torch's do)


@st.composite
def _trace_documents(draw: st.DrawFn) -> bytes:
    seed = draw(st.sampled_from(_trace_seeds()))
    doc = json.loads(seed)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    target = events[: draw(st.integers(1, 400))] if isinstance(events, list) else doc
    if isinstance(doc, dict) and isinstance(events, list):
        doc["traceEvents"] = target
    # Hostile values in real places: names, phases, timestamps, durations, args.
    values = HOSTILE_SCALARS.filter(_jsonable) | json_values()
    target = draw(_data_mutated(target, values, share=False))
    # NaN/Infinity are not JSON, but Python (and some exporters) write them anyway.
    text = json.dumps(doc, default=str)
    return text.encode()


def _jsonable(value: Any) -> bool:
    return not isinstance(value, bytes)


# --------------------------------------------------------------------------- snapshots

# The smallest snapshot a current torch writes: one segment with one active block.
SMALL_SNAPSHOT = pickle.dumps(
    {
        "segments": [
            {
                "device": 0, "address": 1 << 20, "total_size": 4096, "allocated_size": 512,
                "active_size": 512, "requested_size": 500, "stream": 0,
                "segment_type": "small", "segment_pool_id": (0, 0), "is_expandable": False,
                "frames": [], "blocks": [
                    {"address": 1 << 20, "size": 512, "requested_size": 500,
                     "state": "active_allocated", "frames": []},
                    {"address": (1 << 20) + 512, "size": 3584, "requested_size": 0,
                     "state": "inactive", "frames": []},
                ],
            }
        ],
        "device_traces": [[]],
    },
    protocol=4,
)  # fmt: skip


def _segments(obj: Any) -> list:
    return obj["segments"] if isinstance(obj, dict) else obj


def _snapshot_seeds_intact() -> None:
    """Each seed loads to exactly what the stock unpickler reads from it (trusted files),
    its segments keep their sizes, and it is analysed the same gzipped or not."""
    for seed in _snapshot_seeds():
        stock = pickle.loads(seed)  # noqa: S301 - the repository's own sample files
        assert seed_accepted(lambda s=seed: safepickle.loads(s)) == stock
        loaded = seed_accepted(lambda s=seed: load_snapshot(s, LIMITS))
        assert [x.total_size for x in loaded.segments] == [
            x["total_size"] for x in _segments(stock)
        ]
        plain = _analyse_bytes(seed, kinds.MEMORY_SNAPSHOT, seed=True)
        zipped = _analyse_bytes(gzip.compress(seed, compresslevel=1), None, seed=True)
        assert plain is not None and zipped is not None
        assert plain["signals"] == zipped["signals"]


@fuzz_settings(120)
@given(data=st.data())
@example(data=None)  # the unmutated seeds, which must be accepted with their values intact
def test_mutated_snapshot_bytes_are_analysed_or_rejected(data):
    if data is None:
        _snapshot_seeds_intact()
        return
    blob = data.draw(mutated(_snapshot_seeds(), PICKLE_TOKENS))
    kind = data.draw(st.sampled_from([kinds.MEMORY_SNAPSHOT, None]))
    if data.draw(st.booleans()):
        blob = gzip.compress(blob, compresslevel=1)
    _analyse_bytes(blob, kind)


@pytest.mark.slow
@fuzz_settings(80)
@given(data=st.data())
@example(data=None)  # each seed re-pickled unmutated: analysed, as the original is
def test_snapshots_with_hostile_values_are_analysed_or_rejected(data):
    if data is None:
        for seed in _snapshot_seeds():
            again = pickle.dumps(safepickle.loads(seed), protocol=4)
            first = _analyse_bytes(seed, kinds.MEMORY_SNAPSHOT, seed=True)
            second = _analyse_bytes(again, kinds.MEMORY_SNAPSHOT, seed=True)
            assert first is not None and second is not None
            assert first["signals"] == second["signals"]
        return
    _analyse_bytes(data.draw(_snapshot_pickles()), kinds.MEMORY_SNAPSHOT)


@fuzz_settings(150)
@given(blob=st.binary(max_size=2048))
@example(blob=b"\x80\x05" + b"(" * 100 + b".")
@example(blob=b"\x80\x02]q\x00h\x00a.")
@example(blob=b"\x1f\x8b")
@example(blob=SMALL_SNAPSHOT)
def test_arbitrary_bytes_through_the_snapshot_loader(blob):
    if blob == SMALL_SNAPSHOT:
        small = seed_accepted(lambda: load_snapshot(blob, LIMITS))
        assert [s.total_size for s in small.segments] == [4096]
    result = accepted_or_rejected(lambda: load_snapshot(blob, LIMITS), (ArtifactRejected,))
    if result is not None:
        analyse_snapshot(result).as_dict()


# --------------------------------------------------------------------------- chrome traces


def _trace_seeds_intact() -> None:
    """Each seed keeps every event (the count json.loads sees) and is analysed the same
    gzipped or not."""
    for seed in _trace_seeds():
        doc = json.loads(seed)
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        trace = seed_accepted(lambda s=seed: load_chrome_trace(io.BytesIO(s), LIMITS, Deadline(30)))
        assert trace.events_total == sum(trace.phase_counts.values()) == len(events)
        plain = _analyse_bytes(seed, kinds.CHROME_TRACE, seed=True)
        zipped = _analyse_bytes(gzip.compress(seed, compresslevel=1), None, seed=True)
        assert plain is not None and zipped is not None
        assert plain["signals"] == zipped["signals"]


@fuzz_settings(120)
@given(data=st.data())
@example(data=None)  # the unmutated seeds, which must be accepted with their values intact
def test_mutated_trace_bytes_are_analysed_or_rejected(data):
    if data is None:
        _trace_seeds_intact()
        return
    blob = data.draw(mutated(_trace_seeds(), JSON_TOKENS))
    if data.draw(st.booleans()):
        blob = gzip.compress(blob, compresslevel=1)
    _analyse_bytes(blob, data.draw(st.sampled_from([kinds.CHROME_TRACE, None])))


@fuzz_settings(80)
@given(data=st.data())
@example(data=None)  # the seeds re-serialised unmutated: analysed like the originals
def test_traces_with_hostile_values_are_analysed_or_rejected(data):
    if data is None:
        for seed in _trace_seeds():
            again = json.dumps(json.loads(seed)).encode()
            first = _analyse_bytes(seed, kinds.CHROME_TRACE, seed=True)
            second = _analyse_bytes(again, kinds.CHROME_TRACE, seed=True)
            assert first is not None and second is not None
            assert first["signals"] == second["signals"]  # (the byte counts differ)
        return
    _analyse_bytes(data.draw(_trace_documents()), kinds.CHROME_TRACE)


SMALL_TRACE = (
    '{"traceEvents":[{"ph":"X","ts":1,"dur":2,"name":"k","cat":"kernel","pid":0,"tid":0}]}'
)


@fuzz_settings(150)
@given(text=st.text(alphabet=st.sampled_from('{}[]",:0123456789.eE-+ \ntraceEvnsphXBi\\u'),
                    max_size=400))  # fmt: skip
@example(text='{"traceEvents":[' + "[" * 5000)
@example(text='{"traceEvents":[{"ph":"X","ts":1e999,"dur":1e999,"name":"k"}]}')
@example(text=SMALL_TRACE)
def test_json_shaped_noise_through_the_trace_loader(text):
    if text == SMALL_TRACE:
        trace = seed_accepted(
            lambda: load_chrome_trace(io.BytesIO(text.encode()), LIMITS, Deadline(30.0))
        )
        assert (trace.events_total, trace.names, trace.phase_counts) == (1, ["k"], {"X": 1})
    accepted_or_rejected(
        lambda: load_chrome_trace(io.BytesIO(text.encode()), LIMITS, Deadline(30.0)),
        (ArtifactRejected,),
    )


# --------------------------------------------------------------------------- gc logs

GC_TOKENS = (
    b"gc: collecting generation 2...\n", b"gc: collecting young generation...\n",
    b"gc: objects in each generation: 1 2 3\n", b"gc: done, 5 unreachable, 1 uncollectable, "
    b"0.2500s elapsed\n", b"gc: done, 99999999999999999999999 unreachable\n",
    b"gc: done, 1e308s elapsed\n", b"gc: done, nans elapsed\n", b"\r", b"\n", b"\xff\xfe",
    b"INFO 02-30 25:61:61 ", b"[2025-13-45 10:23:45] ", b"\x00",
)  # fmt: skip


@cache
def _gc_seeds() -> tuple[bytes, ...]:
    from enginesim import profiling
    from enginesim.deployment import Deployment, SimClock

    seeds = []
    for scenario in ("gc-pauses", "healthy"):
        d = Deployment(scenario, clock=SimClock("manual"), seed=0)
        d.advance(30)
        seeds.append(profiling.gc_log(d.replicas[0].engine).encode()[:60_000])
    return tuple(seeds)


@fuzz_settings(150)
@given(data=st.data())
@example(data=None)  # the unmutated seeds: every collection kept, analysed
def test_mutated_gc_logs_are_analysed_or_rejected(data):
    if data is None:
        for seed in _gc_seeds():
            log = seed_accepted(lambda s=seed: parse_gc_log(io.BytesIO(s), LIMITS, year=2026))
            assert len(log.collections) == seed.count(b"gc: collecting") > 0
            _analyse_bytes(seed, kinds.GC_LOG, seed=True)
        return
    blob = data.draw(mutated(_gc_seeds(), GC_TOKENS))
    if data.draw(st.booleans()):
        blob = gzip.compress(blob, compresslevel=1)
    result = accepted_or_rejected(
        lambda: parse_gc_log(io.BytesIO(blob), LIMITS, year=2026), (ArtifactRejected,)
    )
    if result is not None:
        json.dumps(analyse_gc_log(result).as_dict(), allow_nan=False)
    _analyse_bytes(blob, kinds.GC_LOG)


@pytest.mark.parametrize(
    "blob",
    [b"\x1f\x8b\x08\x00" + b"\x00" * 6, gzip.compress(b"gc: done,\n")[:-3], b"\x00" * 10],
)
def test_broken_gzip_and_padding_end_as_a_reason(blob, tmp_path):
    path = tmp_path / "artifact"
    path.write_bytes(blob)
    with pytest.raises(ArtifactRejected):
        analyse_file(path, None, LIMITS)
