"""Bulk decoding of traceEvents (msgspec pieces) gives exactly what one-event-at-a-time stdlib
decoding gives, on the JSON where the two decoders differ or a piece cut can go wrong.

The reference is independent of the bulk path: ``json.loads`` of the whole document with the
loader's own settings (strict=False, NaN/Infinity as None), every event handed to the sink
one by one as a dict. A difference in any kept column, count or span fails.
"""

from __future__ import annotations

import dataclasses
import io
import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from artifacts.chrome_trace import DEFAULT_TRACE_LIMITS, _Sink, load_chrome_trace

# Raw JSON events (text, not dicts): literals json.dumps cannot write (NaN, 1e999, 5000-digit
# numbers, lone surrogates, raw control characters) and strings that look like event ends.
TRICKY = [
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2,'
    ' "args": {"stream": 7, "correlation": 3, "device": 0, "grid": [1, 2, 3]}}',
    '{"ph": "X", "cat": "kernel", "name": "a}, {\\"ph\\": \\"X\\"}", "ts": 1, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "s}]", "ts": 2, "dur": 3, "args": {"x": "},"}}',
    '{"ph": "X", "cat": "kernel", "name": "n", "ts": NaN, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "n", "ts": 1, "dur": 1e999}',
    '{"ph": "X", "cat": "kernel", "name": "n", "ts": -Infinity, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "big", "ts": 18446744073709551617, "dur": 1,'
    ' "pid": 123456789012345678901234567890}',
    '{"ph": "X", "cat": "kernel", "name": "big", "ts": 1' + "0" * 400 + ', "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "\\ud800 lone", "ts": 1, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "ctl\x01char", "ts": 1, "dur": 50}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": "12.5", "dur": "3", "tid": "stream 7"}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": true, "dur": 1}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": [1, 2]}',
    '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": null}',
    '{"ph": "X", "cat": "kernel", "name": 7, "ts": 1, "dur": 1}',
    '{"ph": ["X"], "cat": {"a": 1}, "name": "k", "ts": 1, "dur": 1}',
    '{"ph": "X", "cat": ["kernel"], "name": "k", "ts": 1, "dur": 1}',
    '{"ph": "X", "ph": "i", "cat": "kernel", "name": "[memory]", "args": {}}',
    '{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]",'
    ' "args": {"Total Allocated": 10, "Total Reserved": "20", "Total Allocated": 30}}',
    '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": null, "labels": "x"}}',
    '{"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "gpu"}}',
    '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 5, "dur": 2,'
    ' "tid": 9, "args": {"correlation": 99}}',
    '{"ph": "X", "cat": "Kernel", "name": "ncclKernel_AllReduce", "ts": 7, "dur": 4,'
    ' "args": {"Collective name": "allreduce", "In msg nelems": 1024, "dtype": "Float",'
    ' "Group size": 2}}',
    '{"ph": "X", "cat": "python_function", "name": "f", "ts": 1, "dur": 1}',
    '{"ph": "s", "cat": "ac2g", "id": 1, "ts": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#3", "ts": 0, "dur": 100}',
    '{"ph": "X", "cat": "kernel", "name": "deep", "ts": 1, "dur": 1, "args": {"x": '
    + "[" * 50
    + "]" * 50
    + "}}",
    "1",
    '"a string"',
    "null",
    "[]",
    "{}",
]


def _normalised(trace: object) -> dict:
    out = {}
    for f in dataclasses.fields(trace):
        v = getattr(trace, f.name)
        if dataclasses.is_dataclass(v):
            v = {g.name: list(getattr(v, g.name)) for g in dataclasses.fields(v)}
        out[f.name] = repr(v)  # repr: nan != nan, and -0.0 vs 0.0 would hide as ==
    return out


def _reference(text: str) -> dict:
    doc = json.loads(text, strict=False, parse_constant=lambda _c: None)
    sink = _Sink(DEFAULT_TRACE_LIMITS)
    for e in doc["traceEvents"]:
        sink.add(e)
    return {
        "events_total": repr(sink.events),
        "category_counts": repr(sink.cats),
        "phase_counts": repr(sink.phases),
        "dropped_python_function": repr(sink.py_fn),
        "malformed_events": repr(sink.malformed),
        "names": repr(sink.names),
        "gpu": repr(
            {g.name: list(getattr(sink.gpu, g.name)) for g in dataclasses.fields(sink.gpu)}
        ),
        "launches": repr(
            {
                g.name: list(getattr(sink.launches, g.name))
                for g in dataclasses.fields(sink.launches)
            }
        ),
        "steps": repr(sink.steps),
        "step_annotations": repr(sink.annotations),
        "cpu_ops": repr(sink.cpu_ops()),
        "runtime_summary": repr(sink.runtime),
        "collectives": repr(sink.collectives),
        "memory_instants": repr(sink.memory),
        "thread_names": repr(sink.thread_names),
    }


def _check(events: list[str]) -> None:
    text = '{"schemaVersion": 1, "traceEvents": [' + ",\n ".join(events) + "]}"
    got = _normalised(load_chrome_trace(io.BytesIO(text.encode("utf-8", "surrogatepass"))))
    want = _reference(text)
    for key, value in want.items():
        assert got[key] == value, key


def test_tricky_events_one_by_one_and_together() -> None:
    for e in TRICKY:
        _check([e])
    _check(TRICKY)


def test_a_multi_piece_trace_with_tricky_events_scattered_through_it() -> None:
    """~3 MB: many bulk pieces, each with a few events msgspec refuses or a cut can miss."""
    rng = random.Random(20)
    plain = [
        f'{{"ph": "X", "cat": "kernel", "name": "gemm_{i % 40}", "pid": 0, "tid": 7,'
        f' "ts": {i}.25, "dur": 3.5, "args": {{"stream": 7, "correlation": {i}, "device": 0}}}}'
        for i in range(30_000)
    ]
    events = plain + TRICKY  # about half of the ~13 pieces hold none: both paths run
    rng.shuffle(events)
    _check(events)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(TRICKY), min_size=1, max_size=40))
def test_any_mix_of_tricky_events(events: list[str]) -> None:
    _check(events)
