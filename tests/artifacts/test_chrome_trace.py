"""The streaming Chrome-trace reader: every real sample, and every way a file can be hostile."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from artifacts.bounded import Limits, MiB
from artifacts.chrome_trace import COMMUNICATION, TraceLimits, gpu_kind, load_chrome_trace
from artifacts.errors import ArtifactRejected
from tests.support.samples import CHROME_TRACES, samples_absent

REPO = Path(__file__).resolve().parents[2]

# README-measured values: events, first/last/number of ProfilerSteps, kernels, nccl kernels,
# python_function events. Kernels are counted after category normalisation, so the 2021
# ResNet trace ('Kernel') counts 8,772 here where the README's exact-'kernel' count is 0.
MEASURED = {
    "hta_nccl_data_a100_2rank.json.gz": (40573, "ProfilerStep#4", "ProfilerStep#6", 3, 2700, 21, 0),
    "hta_ns_resolution_v100_rank0.pt.trace.json.gz": (
        68692, "ProfilerStep#101", "ProfilerStep#105", 5, 4350, 0, 0,
    ),
    "hta_sampled_rank-0.json.gz": (4855, "ProfilerStep#551", "ProfilerStep#552", 2, 1154, 10, 0),
    "hta_sampled_rank-1.json.gz": (4720, "ProfilerStep#551", "ProfilerStep#552", 2, 1104, 10, 0),
    "hta_alexnet_cuda_sync.json.gz": (1408, None, None, 0, 79, 0, 0),
    "hta_cpu_only_rank34.pt.trace.json.gz": (
        30, "ProfilerStep#551", "ProfilerStep#551", 1, 0, 0, 0,
    ),
    "hta_mi250_rocm.json.gz": (220, "ProfilerStep#1", "ProfilerStep#2", 2, 14, None, 0),
    "hta_df_index_resolver_v100_216k_events.json.gz": (
        216092, "ProfilerStep#2", "ProfilerStep#6", 5, 19370, 2020, 0,
    ),
    "hta_trace_diff_control_2022_async_cpu_to_gpu.json.gz": (
        109123, "ProfilerStep#1009", "ProfilerStep#1014", 6, 8568, 60, 0,
    ),
    "hta_a100_ws16_rank0.json.gz": (108936, "ProfilerStep#550", "ProfilerStep#554", 5, 6080, 80, 0),
    "hta_triton_example.json.gz": (71, "ProfilerStep#1", "ProfilerStep#1", 1, 1, 0, 0),
    "tracelens_h100_qwen1.5-0.5b_inference.json.gz": (
        18221, "ProfilerStep#6", "ProfilerStep#6", 1, 1465, 0, 4262,
    ),
    "tracelens_mi300_vllm_decode_full_graph_capture.pt.trace.json.gz": (
        131243, None, None, 0, 7, None, 119876,
    ),
    "tracelens_mi300_vllm_decode_full_graph_replay.json.gz": (1993, None, None, 0, 425, None, 984),
    "tracelens_mi300_vllm_piecewise_graph_capture.pt.trace.json.gz": (
        122257, None, None, 0, 99, None, 110876,
    ),
    "tracelens_mi300_sglang_qwen3-8b_prefill.json.gz": (60315, None, None, 0, 527, None, 53321),
    "tracelens_mi300_sglang_qwen3-8b_decode.json.gz": (2058, None, None, 0, 555, None, 821),
    "kineto_tbplugin_resnet50_2021.pt.trace.json.gz": (
        75718, "ProfilerStep#5", "ProfilerStep#10", 6, 8772, 0, 0,
    ),
    "mlsys_h100_pinned_streamed_memcpy.json": (107, "ProfilerStep#3", "ProfilerStep#4", 2, 2, 0, 0),
}  # fmt: skip


def _sample(name: str) -> Path:
    path = CHROME_TRACES / name
    if samples_absent(path):
        pytest.skip("shared profiler samples are not available")
    return path


def test_every_sample_is_listed() -> None:
    if samples_absent(CHROME_TRACES):
        pytest.skip("shared profiler samples are not available")
    on_disk = {p.name for p in CHROME_TRACES.iterdir()}
    assert on_disk == set(MEASURED) | {"hta_memory_timeline.raw.gz"}


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_real_sample_loads_with_measured_counts(name: str) -> None:
    events, first, last, n_steps, kernels, nccl, py_fn = MEASURED[name]
    trace = load_chrome_trace(_sample(name))
    assert trace.events_total == events
    steps = sorted({s.name for s in trace.steps}, key=lambda s: int(s.split("#")[1]))
    assert len(steps) == n_steps
    if n_steps:
        assert (steps[0], steps[-1]) == (first, last)
    assert trace.category_counts.get("kernel", 0) == kernels
    assert trace.dropped_python_function == py_fn
    assert trace.malformed_events == 0
    if nccl is not None:  # ROCm traces: HTA counts every hip* name as communication
        comm = sum(1 for k in trace.gpu.kind if k == COMMUNICATION)
        assert comm == nccl
    assert len(trace.gpu) >= kernels


def test_metadata_is_kept() -> None:
    trace = load_chrome_trace(_sample("hta_nccl_data_a100_2rank.json.gz"))
    m = trace.metadata
    assert m["schemaVersion"] == 1
    assert m["distributedInfo"]["world_size"] == 2
    assert m["deviceProperties"][0]["name"] == "NVIDIA A100-PG509-200"
    assert isinstance(m["baseTimeNanoseconds"], int)
    assert m["displayTimeUnit"] == "ms"
    assert "traceEvents" not in m["top_level_keys"]


def test_memory_timeline_raw_is_rejected_precisely() -> None:
    with pytest.raises(ArtifactRejected, match="export_memory_timeline raw output"):
        load_chrome_trace(_sample("hta_memory_timeline.raw.gz"))


def test_gpu_kind_follows_hta() -> None:
    assert gpu_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == 1
    assert gpu_kind("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)") == 1
    assert gpu_kind("Memcpy HtoD (Pageable -> Device)") == 2
    assert gpu_kind("Memset (Device)") == 2
    assert gpu_kind("void at::native::elementwise_kernel<128, 2>()") == 0
    assert gpu_kind("multimem_all_reduce_kernel") == 0  # vLLM custom AR: HTA misses it too


# ---- hostile and malformed input -----------------------------------------------------------


def _load_bytes(data: bytes, **kw) -> object:
    return load_chrome_trace(io.BytesIO(data), **kw)


def _reason(data: bytes, **kw) -> str:
    with pytest.raises(ArtifactRejected) as info:
        _load_bytes(data, **kw)
    return info.value.reason


def _event(i: int = 0) -> dict:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": i, "dur": 1,
            "args": {"stream": 7, "correlation": i}}  # fmt: skip


def _trace_bytes(events: list) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


def test_minimal_trace_and_odd_but_valid_json() -> None:
    t = _load_bytes(_trace_bytes([_event(1), _event(2)]))
    assert len(t.gpu) == 2
    spaced = b'\xef\xbb\xbf { "traceEvents" : [ \n ] , "x" : 1e3 }  \n\x00'
    t = _load_bytes(spaced)
    assert t.events_total == 0 and t.metadata["x"] == 1000.0


def test_invalid_utf8_reports_byte_offset() -> None:
    data = _trace_bytes([_event(1)])
    pos = data.index(b'"k"') + 1
    bad = data[:pos] + b"\xff" + data[pos + 1 :]
    assert _reason(bad) == f"invalid UTF-8 at byte offset {pos} of the decompressed trace"
    gz = gzip.compress(bad)
    assert f"byte offset {pos}" in _reason(gz)


def test_huge_integer_is_rejected() -> None:
    data = b'{"traceEvents": [{"ph": "X", "ts": ' + b"9" * 5000 + b', "dur": 1}]}'
    assert "unreadable number" in _reason(data)
    top = b'{"baseTimeNanoseconds": ' + b"1" * 5000 + b', "traceEvents": []}'
    assert "unreadable number" in _reason(top)


def test_nan_and_infinity_do_not_poison_numbers() -> None:
    data = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": 1},'
    data += b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": Infinity},'
    data += b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1e999}]}'
    t = _load_bytes(data)
    assert t.malformed_events == 3 and len(t.gpu) == 0


@pytest.mark.parametrize("cut", [1, 10, 100, 200, -30, -2, -1])
def test_truncated_json_is_rejected_as_truncated(cut: int) -> None:
    data = _trace_bytes([_event(i) for i in range(20)])
    reason = _reason(data[:cut])
    assert "truncated" in reason, reason


def test_truncated_gzip_is_rejected() -> None:
    gz = gzip.compress(_trace_bytes([_event(i) for i in range(2000)]))
    assert "truncated" in _reason(gz[: len(gz) // 2])


def test_gzip_bomb_stops_at_the_expansion_cap(tmp_path: Path) -> None:
    # One gzip stream that expands to 10 GiB of whitespace inside a valid JSON prefix, built
    # with zlib.compressobj without holding more than 16 MiB: after Z_FULL_FLUSH the
    # compressor state resets, so every 16 MiB block compresses to the same bytes and the
    # segment is written 640 times. (Its trailer is omitted: the cap fires long before it.)
    path = tmp_path / "bomb.json.gz"
    block = b" " * (16 * MiB)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = c.compress(b'{"traceEvents": [') + c.flush(zlib.Z_FULL_FLUSH)
    c.compress(block)
    c.flush(zlib.Z_FULL_FLUSH)
    segment = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    with path.open("wb") as fh:
        fh.write(head)
        for _ in range(640):
            fh.write(segment)
    assert path.stat().st_size < 12 * MiB
    limits = Limits(max_expanded_bytes=256 * MiB)
    unbounded_blanks = TraceLimits(max_blank_chars=1 << 40)  # the expansion cap under test
    with pytest.raises(ArtifactRejected, match="decompression bomb"):
        load_chrome_trace(path, limits=limits, trace_limits=unbounded_blanks)


class _Counting(io.RawIOBase):
    """A file that counts the bytes the loader took from it."""

    def __init__(self, path: Path) -> None:
        self.fh = path.open("rb")
        self.taken = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.fh.readinto(buffer)
        self.taken += n
        return n


def _blank_bomb(path: Path, prefix: bytes, blocks: int, fill: bytes = b" ") -> None:
    """``prefix`` then ``blocks`` x 16 MiB of ``fill`` as one gzip stream (~16 KB a block)."""
    block = fill * (16 * MiB)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    c.compress(block)
    c.flush(zlib.Z_FULL_FLUSH)
    segment = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    with path.open("wb") as fh:
        fh.write(head)
        for _ in range(blocks):
            fh.write(segment)
        fh.write(c.flush())


@pytest.mark.parametrize(
    ("prefix", "fill"),
    [
        (b"", b" "),  # nothing but blanks
        (b'{"traceEvents": [', b"\n"),  # inside the array, before the first event
        (b'{"traceEvents": [{"ph": "X", "ts": 1},', b"\t"),  # between two events
        (b'{"traceEvents": []}', b"\x00"),  # "harmless" zero padding after the document
    ],
)
def test_gibibytes_of_blanks_are_refused_after_a_bounded_read(
    tmp_path: Path, prefix: bytes, fill: bytes
) -> None:
    """Issue 19, finding 3: 4 MB of gzip expanding to 4 GiB of whitespace held a worker for
    the whole expansion cap. Blanks carry no event, so the loader must stop at
    ``max_blank_chars`` (16 MiB): here within its first 1 MiB read of a 4 MB file, with
    the default 4 GiB expansion cap that used to be the only bound."""
    path = tmp_path / "blanks.json.gz"
    _blank_bomb(path, prefix, blocks=256, fill=fill)  # 4 GiB expanded
    size = path.stat().st_size
    assert size > 3 * MiB
    counted = _Counting(path)
    with (
        counted.fh,
        pytest.raises(ArtifactRejected, match="MiB of blank characters in a row"),
    ):
        load_chrome_trace(io.BufferedReader(counted), limits=Limits(max_file_bytes=size + 1))
    assert counted.taken <= MiB, (counted.taken, size)  # the first 1 MiB read of 4


def test_blank_runs_below_the_bound_still_load() -> None:
    """Pretty-printed traces keep loading: the bound is on one run, not on blanks in all."""
    pad = b" " * (2 * MiB)
    data = b'{"traceEvents": [' + pad + b'{"ph": "X", "ts": 1, "dur": 2}' + pad + b"]}" + pad
    trace = load_chrome_trace(io.BytesIO(data), trace_limits=TraceLimits(max_blank_chars=3 * MiB))
    assert trace.events_total == 1


def test_single_100mb_event_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "big-event.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b'{"traceEvents": [{"ph": "X", "name": "')
        chunk = b"a" * MiB
        for _ in range(100):
            fh.write(chunk)
        fh.write(b'"}]}')
    with pytest.raises(ArtifactRejected, match="larger than the 8 MiB limit"):
        load_chrome_trace(path)


def test_top_level_value_size_is_bounded() -> None:
    data = b'{"INFO": "' + b"x" * (3 * MiB) + b'", "traceEvents": []}'
    reason = _reason(data, trace_limits=TraceLimits(max_top_level_value_chars=MiB))
    assert "top-level value 'INFO'" in reason and "1 MiB limit" in reason


def test_deep_nesting_is_rejected() -> None:
    data = b'{"traceEvents": [{"ph": "X", "args": ' + b"[" * 1_000_000 + b"]" * 1_000_000
    data += b"}]}"
    assert "nested too deeply" in _reason(data)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "file is empty"),
        (b"   \n\t ", "only whitespace"),
        (b"\x00\x01garbage\xfe", "invalid UTF-8"),
        (b"hello world", "not JSON"),
        (b"<html><body>502</body></html>", "not JSON"),
        (b"42", "JSON scalar"),
        (b"[]", "empty JSON array"),
        (b"[1, 2, 3]", "JSON array of int"),
        (b'[{"ph": "X", "ts": 1}]', "bare JSON array of trace events"),
        (b"{}", "no traceEvents"),
        (b'{"segments": [], "device_traces": []}', "without a traceEvents array"),
        (b'{"traceEvents": {}}', "traceEvents is not an array"),
        (b'{"traceEvents": [], "traceEvents": []}', "appears twice"),
        (b'{"traceEvents": [1 2]}', "expected , or ]"),
        (b'{"traceEvents": [{"a": tru}], "b": 1}', "invalid JSON"),
        (b'{"traceEvents": []} trailing', "unexpected data after"),
        (pickle.dumps({"segments": []}), "Python pickle"),
    ],
)
def test_non_traces_are_rejected_precisely(data: bytes, expected: str) -> None:
    assert expected in _reason(data)


def test_non_dict_events_are_counted_not_fatal() -> None:
    t = _load_bytes(b'{"traceEvents": [1, "x", null, [], {"ph": "M"}]}')
    assert t.events_total == 5 and t.malformed_events == 4


def test_python_function_events_are_dropped() -> None:
    ev = {"ph": "X", "cat": "python_function", "name": "f", "ts": 1, "dur": 1}
    t = _load_bytes(_trace_bytes([ev] * 10 + [_event(3)]))
    assert t.dropped_python_function == 10 and len(t.gpu) == 1 and t.cpu_ops == []


# ---- memory bound ------------------------------------------------------------------------


def _big_trace_rows(i: int) -> list[dict]:
    ts = i * 10.0
    return [
        {"ph": "X", "cat": "python_function", "name": "vllm/worker.py(12): step",
         "pid": 1, "tid": 1, "ts": ts, "dur": 9.0, "args": {"Python id": i}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts,
         "dur": 8.0, "args": {"External id": i, "Sequence number": i}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
         "tid": 1, "ts": ts + 1, "dur": 4.0, "args": {"correlation": i, "cbid": 211}},
        {"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": ts + 1, "cat": "ac2g",
         "name": "ac2g"},
        {"ph": "X", "cat": "kernel", "name": f"sm90_gemm_{i % 50}", "pid": 0, "tid": 7,
         "ts": ts + 6, "dur": 3.5, "args": {"stream": 7, "correlation": i, "device": 0,
         "grid": [132, 1, 1], "block": [128, 1, 1], "registers per thread": 168}},
        {"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": ts + 6, "cat": "ac2g",
         "name": "ac2g", "bp": "e"},
    ]  # fmt: skip


def _big_trace_template() -> str:
    """One step's six events as a format string: json.dumps once, not a million times (the
    output is byte for byte what json.dumps gives; the test below checks one step)."""
    marker = 987_654_321  # an id no real step has, distinct from every other number here
    text = ",\n".join(json.dumps(r) for r in _big_trace_rows(marker))
    text = text.replace("{", "{{").replace("}", "}}")  # JSON's braces, literal for format()
    base = marker * 10.0
    for ts, field in ((base, "{t0}"), (base + 1, "{t1}"), (base + 6, "{t6}")):
        text = text.replace(f'"ts": {ts!r}', f'"ts": {field}')
    text = text.replace(f"sm90_gemm_{marker % 50}", "sm90_gemm_{g}")
    return text.replace(str(marker), "{i}")


def test_the_big_trace_template_is_what_json_dumps_writes() -> None:
    template = _big_trace_template()
    for i in (0, 1, 49, 123_456):
        ts = i * 10.0
        got = template.format(i=i, t0=repr(ts), t1=repr(ts + 1), t6=repr(ts + 6), g=i % 50)
        assert got == ",\n".join(json.dumps(r) for r in _big_trace_rows(i))


def _write_big_trace(path: Path, events: int) -> int:
    """A 1M-event vLLM-like trace written in a streaming way; returns its raw JSON size."""
    template = _big_trace_template()
    raw = 0
    with gzip.open(path, "wb", compresslevel=1) as fh:
        head = b'{"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": [\n'
        fh.write(head)
        raw += len(head)
        per = 6
        for i in range(events // per):
            ts = i * 10.0
            step = template.format(i=i, t0=repr(ts), t1=repr(ts + 1), t6=repr(ts + 6), g=i % 50)
            line = (b",\n" if i else b"") + step.encode()
            fh.write(line)
            raw += len(line)
        tail = b'\n], "traceName": "big"}'
        fh.write(tail)
        raw += len(tail)
    return raw


# Loads and analyses the trace in a fresh interpreter and reports how far its peak resident
# memory rose above what the imports left: the whole process (zlib's buffers included) and
# ~4x faster than tracemalloc, which made this the suite's slowest test (236 s, busy machine).
_MEASURE = """
import json, resource, sys
from artifacts.chrome_trace import load_chrome_trace
from artifacts.trace_analysis import analyse_trace
def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
base = peak()
trace = load_chrome_trace(sys.argv[1])
loaded = peak()
result = analyse_trace(trace).as_dict()
print(json.dumps({
    "load": loaded - base, "all": peak() - base, "events_total": trace.events_total,
    "dropped": trace.dropped_python_function,
    "eager": result["graph_launches"]["kernels_from_eager_launches"],
}))
"""


@pytest.mark.slow
def test_memory_stays_bounded_on_a_million_events(tmp_path: Path) -> None:
    path = tmp_path / "big.pt.trace.json.gz"
    raw = _write_big_trace(path, 1_000_002)
    assert raw > 140 * MiB
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)], cwd=REPO, capture_output=True, text=True,
        check=True, timeout=1800,
    )  # fmt: skip
    out = json.loads(done.stdout)
    assert out["events_total"] == 1_000_002
    assert out["dropped"] == 166_667
    assert out["eager"] == 166_667
    # ~167k kernels + launches kept in columns: a few tens of MB, not the ~150 MB of JSON
    # (json.load of it would take well over a GiB).
    assert out["load"] < 40 * MiB, out
    assert out["all"] < 80 * MiB, out
