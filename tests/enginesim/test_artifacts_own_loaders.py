"""The simulator's profiler artifacts, fetched over HTTP, load with the product's own loaders
and lead to the scenario's cause (and to none for a healthy engine)."""

from __future__ import annotations

import pytest

from artifacts.analysis import analyse_file
from artifacts.chrome_trace import load_chrome_trace
from artifacts.gc_log import parse_gc_log
from artifacts.memory_snapshot import load_snapshot

TRACE = "/profiler/trace?mode=last&steps=400"
SNAPSHOT = "/profiler/memory_snapshot?rank=0"
GC_LOG = "/profiler/gc_log"


def _fetch(h, path: str, tmp_path, name: str):
    body = h.get(path)
    out = tmp_path / name
    out.write_bytes(body)
    return out


@pytest.mark.parametrize(
    ("scenario", "at_s", "path", "finding"),
    [
        ("graph-pool-growth", 600, SNAPSHOT, "cuda-graph-pool-growth"),
        ("allocator-leak", 250, SNAPSHOT, "allocator-leak"),
        ("long-prefill-itl", 120, TRACE, "oversized-prefill-chunks"),
        ("prefill-unchunked", 180, TRACE, "oversized-prefill-chunks"),
        ("gc-pauses", 120, GC_LOG, "gc-pauses"),
        ("healthy", 300, SNAPSHOT, None),
        ("healthy", 300, TRACE, None),
        ("healthy", 300, GC_LOG, None),
    ],
)
def test_artifacts_lead_to_the_scenarios_cause(harness, tmp_path, scenario, at_s, path, finding):
    h = harness(scenario)
    h.advance_to(at_s)
    analysis = analyse_file(_fetch(h, path, tmp_path, "artifact"))
    keys = {f["key"] for f in analysis["findings"]} - {"oom"}
    assert keys == ({finding} if finding else set()), analysis["findings"]


def test_each_kind_loads_with_its_loader(harness, tmp_path):
    h = harness("gc-pauses")
    h.advance_to(120)
    snapshot = load_snapshot(_fetch(h, SNAPSHOT, tmp_path, "s.pickle"))
    assert snapshot.layout and snapshot.devices
    trace = load_chrome_trace(_fetch(h, TRACE, tmp_path, "t.json"))
    assert len(trace.steps) >= 100
    log = parse_gc_log(_fetch(h, GC_LOG, tmp_path, "gc.log"))
    # DEBUG_STATS lines have no clock: every collection is timed from the engine's own
    # timestamped lines served around it.
    assert log.collections and all(c.time is not None for c in log.collections)


def test_sglang_format_artifacts_load_too(harness, tmp_path):
    h = harness("healthy", fmt="sglang")
    h.advance_to(60)
    assert load_chrome_trace(_fetch(h, TRACE, tmp_path, "t.json")).steps
    assert parse_gc_log(_fetch(h, GC_LOG, tmp_path, "gc.log")).collections
