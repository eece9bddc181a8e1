"""Parity with PyTorch's own ``torch.cuda._memory_viz`` on every real sample.

torch is a test-only dependency: skipped where absent, except in CI where it must exist.
The files reach torch through OUR safe loader, never the stock unpickler.
"""

from __future__ import annotations

import os
import re

import pytest

from artifacts import safepickle
from artifacts.memory_analysis import analyse_snapshot
from artifacts.memory_snapshot import validate
from tests.support.samples import MEMORY_SNAPSHOTS, samples_absent

if os.environ.get("CI") == "true":
    import torch
else:
    torch = pytest.importorskip("torch")

from torch.cuda import _memory_viz

pytestmark = pytest.mark.slow  # torch's import and its own pure-Python walk of each file

NAMES = sorted(
    [
        "mlsys_profile_grad.pkl",
        "mlsys_profile_no_grad.pkl",
        "ftcourse_memory_snapshot.pickle",
        "cs336_ctx128_fullstep.pickle",
        "voxelflex_dump_snapshot_no_history.pickle",
        "llminf_oom_snapshot_legacy_v2_0.pickle",
        "layoutediting_segments_only_list.pkl",
    ]
)


@pytest.mark.parametrize("name", NAMES)
def test_totals_match_memory_viz_segsum(name: str) -> None:
    path = MEMORY_SNAPSHOTS / name
    if samples_absent(path):
        pytest.skip("shared profiler samples are not available")
    data = safepickle.load(path)
    ours = analyse_snapshot(validate(data)).as_dict()
    viz_input = {"segments": data} if isinstance(data, list) else data

    # Exact numbers, computed with _memory_viz's own per-block helper.
    reserved = sum(s["total_size"] for s in viz_input["segments"])
    allocated = sum(
        _memory_viz._block_extra(b)[1]
        for s in viz_input["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    )
    assert ours["reserved_bytes"] == reserved
    assert ours["segsum_allocated_bytes"] == allocated

    # segsum's printed summary, formatted by torch from our numbers, is identical.
    text = _memory_viz.segsum(viz_input)
    lines = dict(re.findall(r"^(segments|total_reserved|total_allocated|total_free): (.*)$",
                            text, re.M))  # fmt: skip
    assert lines["segments"] == str(len(viz_input["segments"]))
    assert lines["total_reserved"] == repr(_memory_viz.Bytes(ours["reserved_bytes"]))
    assert lines["total_allocated"] == repr(_memory_viz.Bytes(ours["segsum_allocated_bytes"]))
    assert lines["total_free"] == _memory_viz._report_free(
        ours["free_external_bytes"], ours["free_internal_bytes"]
    )


@pytest.mark.parametrize("name", ["mlsys_profile_grad.pkl", "cs336_ctx128_fullstep.pickle"])
def test_trace_replay_runs_on_safely_loaded_data(name: str) -> None:
    path = MEMORY_SNAPSHOTS / name
    if samples_absent(path):
        pytest.skip("shared profiler samples are not available")
    data = safepickle.load(path)
    text = _memory_viz.trace(data)
    snap = validate(data)
    ours = [e.action for trace in snap.device_traces for e in trace]
    assert text.count("cudaMalloc(") == ours.count("segment_alloc")
    assert text.count("\ndel ") == ours.count("free_requested")
    assert text.count(" entries\n") == sum(1 for t in snap.device_traces if t)
