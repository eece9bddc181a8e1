"""Interval totals are exact on epoch-microsecond traces.

Real torch.profiler traces stamp events in microseconds since the epoch (~1.67e15). Summing
all ends and all starts separately reaches ~4e19, where a double steps by 4,096 us, so every
union total came out a multiple of 4,096 us. The reference here is integer arithmetic over
the same intervals, which has no rounding at all."""

from __future__ import annotations

import io
import json
from array import array

import numpy as np
import pytest

from artifacts.chrome_trace import load_chrome_trace
from artifacts.trace_analysis import _total, analyse_trace, intersection_length, merge_intervals

EPOCH_US = 1_670_000_000_000_000  # 2022-12-02 in microseconds, as torch.profiler writes it
COMPUTE_NAME = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
COMM_NAME = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


Kernels = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # stream, ts, dur, is_comm


def _kernels(n: int, seed: int) -> Kernels:
    """Two streams of integer-microsecond kernels, back to back or with gaps, overlapping
    each other; stream 13 carries the collectives."""
    rng = np.random.default_rng(seed)
    stream = np.where(rng.random(n) < 0.7, 7, 13)
    gap = rng.choice(np.array([0, 1, 2, 5, 40, 1_000]), n)
    dur = rng.integers(1, 401, n)
    ts = np.empty(n, dtype=np.int64)
    for sid, offset in ((7, 0), (13, 3)):
        mask = stream == sid
        ts[mask] = EPOCH_US + offset + np.cumsum(gap[mask] + dur[mask]) - dur[mask]
    return stream, ts, dur, stream == 13


def _union_us(ts: np.ndarray, dur: np.ndarray) -> int:
    """Integer length of the union of [ts, ts+dur): touching intervals merge, as in the product."""
    if not len(ts):
        return 0
    order = np.argsort(ts, kind="stable")
    s, e = ts[order], (ts + dur)[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0], new[1:] = True, s[1:] > reach[:-1]
    firsts = np.nonzero(new)[0]
    lasts = np.append(firsts[1:] - 1, len(s) - 1)
    return int((reach[lasts] - s[firsts]).sum())


def _merged(ts: np.ndarray, dur: np.ndarray) -> tuple[array, array]:
    order = np.argsort(ts, kind="stable")
    fts, fdur = array("d"), array("d")
    fts.frombytes(ts[order].astype(np.float64).tobytes())
    fdur.frombytes(dur[order].astype(np.float64).tobytes())
    return merge_intervals(range(len(fts)), fts, fdur)


@pytest.mark.parametrize("n", [216_000, 1_000_000, pytest.param(5_000_000, marks=pytest.mark.slow)])
def test_union_totals_equal_integer_reference(n: int) -> None:
    _, ts, dur, comm = _kernels(n, seed=n)
    every_us = _union_us(ts, dur)
    comm_us, compute_us = _union_us(ts[comm], dur[comm]), _union_us(ts[~comm], dur[~comm])
    assert _total(_merged(ts, dur)) == every_us
    assert _total(_merged(ts[comm], dur[comm])) == comm_us
    overlap = intersection_length(_merged(ts[comm], dur[comm]), _merged(ts[~comm], dur[~comm]))
    # overlap(A, B) = |A| + |B| - |A or B|, all in integers.
    assert overlap == comm_us + compute_us - every_us


def _trace_json(kernels: Kernels) -> bytes:
    columns = [k.tolist() for k in kernels]
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": COMM_NAME if is_comm else COMPUTE_NAME,
            "pid": 0,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": i + 1},
        }
        for i, (stream, ts, dur, is_comm) in enumerate(zip(*columns, strict=True))
    ]
    return json.dumps({"traceEvents": events}).encode()


@pytest.mark.slow
def test_analysis_totals_are_exact_to_the_microsecond_at_216k_events() -> None:
    kernels = _kernels(216_000, seed=1)
    _, ts, dur, comm = kernels
    result = analyse_trace(load_chrome_trace(io.BytesIO(_trace_json(kernels)))).as_dict()

    span = int((ts + dur).max() - ts.min())
    busy = _union_us(ts, dur)
    idle_us = span - busy
    compute_us = _union_us(ts[~comm], dur[~comm])
    idle = result["idle"]
    assert round(idle["kernel_time_ms"] * 1000) == span
    assert round(idle["idle_ms"] * 1000) == idle_us
    assert round(idle["compute_ms"] * 1000) == compute_us
    assert round(idle["non_compute_ms"] * 1000) == span - compute_us - idle_us
    comm_us = _union_us(ts[comm], dur[comm])
    collectives = result["collectives"]
    assert round(collectives["comm_time_ms"] * 1000) == comm_us
    # A union can never exceed the plain sum of its members (it did, by 33 us, before).
    assert comm_us <= int(dur[comm].sum())
    assert round(collectives["overlap_ms"] * 1000) == comm_us + compute_us - busy
