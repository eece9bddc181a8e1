"""Simulated CUDA memory snapshots must be pure data and reconstructable like real ones."""

from __future__ import annotations

import io
import pickle
import pickletools

import pytest

from enginesim.artifacts import (
    GraphCapture,
    RankMemory,
    build_memory_snapshot,
    dump_memory_snapshot,
    expected_totals,
    oom_details,
)
from tests.support.complexity import calls
from tests.support.samples import MEMORY_SNAPSHOTS, samples_absent

GiB = 1 << 30
MiB = 1 << 20
HOUR = 3600.0
SAMPLES = MEMORY_SNAPSHOTS
# Every opcode the real samples use, plus the harmless data opcodes MemoryViz.js accepts.
DATA_OPCODES = {
    "PROTO", "FRAME", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "MARK", "SETITEM", "SETITEMS",
    "APPEND", "APPENDS", "SHORT_BINUNICODE", "BINUNICODE", "BININT", "BININT1", "BININT2",
    "LONG1", "BINFLOAT", "NEWFALSE", "NEWTRUE", "NONE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "STOP",
}  # fmt: skip


class DataOnlyUnpickler(pickle.Unpickler):
    """The documented "restricting globals" loader: any class or global is refused."""

    def find_class(self, module: str, name: str):  # pragma: no cover - must never run
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")


def safe_load(data: bytes):
    return DataOnlyUnpickler(io.BytesIO(data)).load()


def graph_growth_rank(*, oom: bool = True, device: int = 0) -> RankMemory:
    """Walkthrough 2: warm-up captures, then 2 GiB on-the-fly captures hours apart."""
    warm = tuple(
        GraphCapture(100.0 + i * 0.2, n, 24 * MiB, after_warmup=False)
        for i, n in enumerate((1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
    )
    late = tuple(
        GraphCapture(t * HOUR, 401, 2 * GiB, after_warmup=True) for t in (10.0, 21.0, 31.0)
    )
    return RankMemory(
        device=device,
        total_bytes=85018279936,
        weights_bytes=35 * 10**9,
        kv_pool_bytes=35 * GiB,
        activation_peak_bytes=3 * GiB,
        graph_captures=warm + late,
        leaked_bytes=((5 * HOUR, 64 * MiB), (30 * HOUR, 192 * MiB)),
        oom_at_s=40 * HOUR if oom else None,
        now_s=48 * HOUR,
    )


def final_totals(snapshot: dict, device: int) -> tuple[int, int]:
    """MemoryViz's header: reserved = sum of segments, allocated = live requested bytes."""
    segs = [s for s in snapshot["segments"] if s["device"] == device]
    reserved = sum(s["total_size"] for s in segs)
    allocated = sum(
        b["requested_size"]
        for s in segs
        for b in s["blocks"]
        if b["state"] in ("active_allocated", "active_pending_free")
    )
    return reserved, allocated


def reconstruct(snapshot: dict, device: int) -> list[tuple[int, int, int]]:
    """(time_us, reserved, allocated) after each kept event, walking back from the end."""
    reserved, allocated = final_totals(snapshot, device)
    out = []
    for entry in reversed(snapshot["device_traces"][device]):
        out.append((entry["time_us"], reserved, allocated))
        action, size = entry["action"], entry["size"]
        if action in ("segment_alloc", "segment_map"):
            reserved -= size
        elif action in ("segment_free", "segment_unmap"):
            reserved += size
        elif action == "alloc":
            allocated -= size
        elif action == "free_completed":
            allocated += size
    out.reverse()
    return out


def at_distinct_times(points: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Keep the last point per timestamp: the state after every event at that instant."""
    return [p for i, p in enumerate(points) if i + 1 == len(points) or points[i + 1][0] != p[0]]


def test_pickle_is_pure_data_and_loads_with_restricted_unpickler() -> None:
    data = dump_memory_snapshot(graph_growth_rank(), max_entries=5000)
    opcodes = {op.name for op, _arg, _pos in pickletools.genops(data)}
    assert opcodes <= DATA_OPCODES, opcodes - DATA_OPCODES
    snap = safe_load(data)
    assert set(snap) == {"segments", "device_traces", "allocator_settings", "external_annotations"}
    assert isinstance(snap["segments"][0]["segment_pool_id"], tuple)


def test_output_is_deterministic() -> None:
    rank = graph_growth_rank()
    assert dump_memory_snapshot(rank, max_entries=3000) == dump_memory_snapshot(
        rank, max_entries=3000
    )


def test_key_layout_matches_real_torch_sample() -> None:
    sample_path = SAMPLES / "mlsys_profile_grad.pkl"
    if samples_absent(sample_path):
        pytest.skip("shared profiler samples are not available")
    real = safe_load(sample_path.read_bytes())
    ours = build_memory_snapshot(graph_growth_rank(), max_entries=2000)
    assert set(real) <= set(ours)
    assert set(real["segments"][0]) == set(ours["segments"][0])
    assert set(real["segments"][0]["blocks"][0]) == set(ours["segments"][0]["blocks"][0])
    assert set(real["allocator_settings"]) <= set(ours["allocator_settings"])
    real_entry = real["device_traces"][0][0]
    our_entries = [e for e in ours["device_traces"][0] if e["action"] != "oom"]
    assert {set(e) == set(real_entry) for e in our_entries} == {True}
    assert set(real_entry["frames"][0]) == set(our_entries[0]["frames"][0])
    for key, value in real["segments"][0].items():
        assert type(ours["segments"][0][key]) is type(value), key


def test_segments_are_internally_consistent() -> None:
    snap = build_memory_snapshot(graph_growth_rank(), max_entries=1000)
    for seg in snap["segments"]:
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        address = seg["address"]
        for block in seg["blocks"]:
            assert block["address"] == address
            address += block["size"]
        live = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
        assert seg["allocated_size"] == sum(b["size"] for b in live)
        assert seg["requested_size"] == sum(b["requested_size"] for b in live)
        assert seg["segment_type"] == ("small" if seg["total_size"] == 2 * MiB else "large")
        assert all(b["frames"] for b in live)
    times = [e["time_us"] for e in snap["device_traces"][0]]
    assert times == sorted(times)


def test_backward_reconstruction_matches_intended_totals() -> None:
    rank = graph_growth_rank()
    kw = {"max_entries": 30000, "churn_interval_s": None}
    snap = build_memory_snapshot(rank, **kw)
    end = expected_totals(rank, rank.now_s, **kw)
    assert final_totals(snap, 0) == end
    epoch_us = round(1770925809.0 * 1e6)
    points = at_distinct_times(reconstruct(snap, 0))
    assert len(points) > 1000
    for t_us, reserved, allocated in points:
        assert (reserved, allocated) == expected_totals(rank, (t_us - epoch_us) / 1e6, **kw)


def test_graph_pool_segments_and_reserved_steps_at_capture_times() -> None:
    rank = graph_growth_rank()
    snap = build_memory_snapshot(rank, max_entries=30000, churn_interval_s=None)
    pools: dict[tuple[int, int], int] = {}
    for seg in snap["segments"]:
        pools[seg["segment_pool_id"]] = pools.get(seg["segment_pool_id"], 0) + seg["total_size"]
    late = [c for c in rank.graph_captures if c.after_warmup]
    assert set(pools) == {(0, 0), (0, 1)} | {(0, 2 + i) for i in range(len(late))}
    for i, capture in enumerate(late):
        assert abs(pools[(0, 2 + i)] - capture.pool_bytes) <= 4 * MiB
    epoch_us = round(1770925809.0 * 1e6)
    points = reconstruct(snap, 0)
    for capture in late:
        t_us = epoch_us + round(capture.time_s * 1e6)
        before = [p for p in points if p[0] < t_us][-1][1]
        after = [p for p in points if p[0] <= t_us + 1_000_000][-1][1]
        assert abs((after - before) - capture.pool_bytes) <= 4 * MiB
    capture_seg = next(s for s in snap["segments"] if s["segment_pool_id"] == (0, 2))
    names = {f["name"] for f in capture_seg["frames"]}
    assert {"__call__", "execute_model"} <= names
    warm_seg = next(s for s in snap["segments"] if s["segment_pool_id"] == (0, 1))
    assert "capture_model" in {f["name"] for f in warm_seg["frames"]}


def test_ring_buffer_truncation_keeps_final_state_authoritative() -> None:
    rank = graph_growth_rank()
    full = build_memory_snapshot(rank, max_entries=40000)
    small = build_memory_snapshot(rank, max_entries=500)
    trace = small["device_traces"][0]
    assert len(trace) == 500
    assert trace == full["device_traces"][0][-500:]
    assert small["segments"] == full["segments"]
    epoch_us = round(1770925809.0 * 1e6)
    # The oldest kept event is hours after start-up, yet the walk back is still exact.
    assert trace[0]["time_us"] - epoch_us > 30 * HOUR * 1e6
    for t_us, reserved, allocated in at_distinct_times(reconstruct(small, 0)):
        expected = expected_totals(rank, (t_us - epoch_us) / 1e6, max_entries=500)
        assert (reserved, allocated) == expected


def test_oom_entry_matches_details_and_ends_history() -> None:
    rank = graph_growth_rank()
    snap = build_memory_snapshot(rank, max_entries=2000)
    last = snap["device_traces"][0][-1]
    details = oom_details(rank)
    assert details is not None
    assert last["action"] == "oom" and "addr" not in last
    assert last["device_free"] == details.device_free_bytes
    assert last["size"] == details.requested_bytes > details.device_free_bytes
    assert last["time_us"] == round(1770925809.0 * 1e6) + round(rank.oom_at_s * 1e6)
    reserved, allocated = final_totals(snap, 0)
    assert (details.reserved_bytes, details.allocated_bytes) == (reserved, allocated)
    # The allocator returned its idle cached segments before giving up.
    assert snap["device_traces"][0][-2]["action"] == "segment_free"

    healthy = graph_growth_rank(oom=False)
    trace = build_memory_snapshot(healthy, max_entries=2000)["device_traces"][0]
    assert all(e["action"] != "oom" for e in trace)
    assert oom_details(healthy) is None


def test_leaks_only_grow_allocated() -> None:
    rank = graph_growth_rank(oom=False)
    before = expected_totals(rank, 5 * HOUR - 1.0)
    after = expected_totals(rank, 5 * HOUR + 1.0)
    assert after[1] - before[1] == 64 * MiB
    later = expected_totals(rank, 30 * HOUR + 1.0)
    assert later[1] - expected_totals(rank, 30 * HOUR - 1.0)[1] == 128 * MiB
    snap = build_memory_snapshot(rank, max_entries=100)
    leak_blocks = [
        b
        for s in snap["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
        and any(f["name"] == "_prepare_inputs" for f in b["frames"])
    ]
    assert sum(b["requested_size"] for b in leak_blocks) == 192 * MiB


def test_budget_components_are_all_present() -> None:
    rank = graph_growth_rank(oom=False)
    snap = build_memory_snapshot(rank, max_entries=10)
    reserved, allocated = final_totals(snap, 0)
    pools = sum(c.pool_bytes for c in rank.graph_captures)
    floor = rank.weights_bytes + rank.kv_pool_bytes + 192 * MiB
    assert floor < allocated < floor + pools
    # Reserved = every component plus at most one 2 MiB rounding tail per segment.
    budget = floor + pools + rank.activation_peak_bytes
    assert 0 <= reserved - budget < len(snap["segments"]) * 2 * MiB


def test_multi_device_and_versions() -> None:
    ranks = [graph_growth_rank(device=d, oom=False) for d in range(2)]
    snap = build_memory_snapshot(ranks, max_entries=50, device_count=4)
    assert [len(t) for t in snap["device_traces"]] == [50, 50, 0, 0]
    assert {s["device"] for s in snap["segments"]} == {0, 1}
    old = build_memory_snapshot(ranks[0], max_entries=50, torch_version="2.1")
    assert set(old) == {"segments", "device_traces"}
    assert "time_us" not in old["device_traces"][0][0]
    new = build_memory_snapshot(ranks[0], max_entries=50, torch_version="2.9")
    assert new["allocator_settings"]["graph_capture_record_stream_reuse"] is False
    with pytest.raises(ValueError):
        build_memory_snapshot(ranks[0], torch_version="2.0")


def test_a_hundred_thousand_entries_cost_linear_work() -> None:
    """Counted in function calls, not seconds (timing: bench/enginesim_artifacts.py)."""
    rank = graph_growth_rank()
    few, _ = calls(dump_memory_snapshot, rank, max_entries=10_000)
    many, data = calls(dump_memory_snapshot, rank, max_entries=100_000)
    assert len(safe_load(data)["device_traces"][0]) == 100_000
    assert many / few < 10 * 1.1, (few, many)  # quadratic work would be 100 times
