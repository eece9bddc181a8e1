"""Memory snapshots: real samples load with the README's totals, the backward walk matches
the simulator's truth, and findings fire on the enginesim incidents and nowhere else."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import pytest

from artifacts.errors import ArtifactRejected
from artifacts.memory_analysis import _final_state, _PoolIndex, analyse_snapshot, reconstruct
from artifacts.memory_snapshot import load_snapshot, validate
from enginesim.artifacts import (
    GraphCapture,
    RankMemory,
    build_memory_snapshot,
    expected_totals,
)
from tests.support.samples import MEMORY_SNAPSHOTS, samples_absent

GiB = 1 << 30
MiB = 1 << 20
HOUR = 3600.0
EPOCH_US = round(1770925809.0 * 1e6)

# From shared/samples/profiler/README.md ("measured" lines): reserved / allocated GiB
# (allocated there is Σ segment allocated_size), segments, trace entries per device.
README = {
    "mlsys_profile_grad.pkl": (4.13, 3.01, 7, [33]),
    "mlsys_profile_no_grad.pkl": (4.13, 3.01, 7, [33]),
    "ftcourse_memory_snapshot.pickle": (6.03, 2.14, 215, [10307]),
    "cs336_ctx128_fullstep.pickle": (56.91, 51.11, 1010, [19342]),
    "voxelflex_dump_snapshot_no_history.pickle": (0.04, 0.02, 3, [0]),
    "llminf_oom_snapshot_legacy_v2_0.pickle": (11.03, 11.03, 176, [1]),
    "layoutediting_segments_only_list.pkl": (None, None, 255, []),
}
LAYOUTS = {
    "llminf_oom_snapshot_legacy_v2_0.pickle": "legacy",
    "layoutediting_segments_only_list.pkl": "segments-list",
}


def sample(name: str) -> Path:
    path = MEMORY_SNAPSHOTS / name
    if samples_absent(path):
        pytest.skip("shared profiler samples are not available")
    return path


# ----------------------------------------------------------------- real samples


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(README))
def test_real_samples_load_with_readme_totals(name: str) -> None:
    reserved, allocated, nsegs, entries = README[name]
    snap = load_snapshot(sample(name))
    assert snap.layout == LAYOUTS.get(name, "dump")
    assert len(snap.segments) == nsegs
    assert [len(t) for t in snap.device_traces] == entries
    result = analyse_snapshot(snap)
    out = result.as_dict()
    json.dumps(out)
    if reserved is not None:
        assert round(out["reserved_bytes"] / GiB, 2) == reserved
        assert round(out["allocated_rounded_bytes"] / GiB, 2) == allocated
    # segsum's identity holds for every sample
    assert (
        out["segsum_allocated_bytes"] + out["free_internal_bytes"] + out["free_external_bytes"]
        == out["reserved_bytes"]
    )
    # No incident findings on training/inference runs that have none.
    assert [f["key"] for f in out["findings"]] == []
    assert out["signals"]["artifact_oom_count"] == 0
    assert out["graph_pool_bytes"] == 0


def test_mlsys_history_from_empty_reconstructs_to_zero() -> None:
    snap = load_snapshot(sample("mlsys_profile_grad.pkl"))
    dev = analyse_snapshot(snap).devices[0]
    assert (dev.start_reserved_bytes, dev.start_allocated_bytes) == (0, 0)
    # Forward replay (reference §2): Σalloc - Σfree and Σ segment deltas equal the snapshot.
    entries = snap.device_traces[0]
    forward_alloc = sum(
        e.size if e.action == "alloc" else -e.size
        for e in entries
        if e.action in ("alloc", "free_completed")
    )
    forward_reserved = sum(e.size for e in entries if e.action == "segment_alloc")
    assert forward_alloc == dev.allocated_bytes == 3_233_754_432
    assert forward_reserved == dev.reserved_bytes == 4_439_670_784
    assert dev.x_unit == "time_us"
    top = analyse_snapshot(snap).top_sites[0]
    assert top.site.endswith("profile_grad.py:8 <module>")


def test_late_history_recovers_the_pre_trace_baseline() -> None:
    snap = load_snapshot(sample("cs336_ctx128_fullstep.pickle"))
    dev = analyse_snapshot(snap).devices[0]
    # forward deltas are 40.97 GB / 47.35 GB of the 54.60 / 61.11 GB final (reference §2)
    assert dev.start_allocated_bytes > 10 * GiB
    assert dev.start_reserved_bytes > 10 * GiB
    assert dev.span_s < 1.0  # a single training step: growth, but no leak finding
    assert dev.leak_fraction >= 0.7


def test_no_time_us_uses_the_event_index() -> None:
    dev = analyse_snapshot(load_snapshot(sample("ftcourse_memory_snapshot.pickle"))).devices[0]
    assert dev.x_unit == "event"
    assert len(dev.timeline["x"]) <= 2000
    assert dev.timeline["x"][0] == 0


def test_legacy_allocated_uses_history_real_size() -> None:
    snap = load_snapshot(sample("llminf_oom_snapshot_legacy_v2_0.pickle"))
    blocks = [b for s in snap.segments for b in s.blocks if b.real_size is not None]
    assert blocks and all(s.pool_id is None for s in snap.segments)
    dev = analyse_snapshot(snap).devices[0]
    assert dev.allocated_bytes == sum(b.real_size for b in blocks if b.live)
    assert analyse_snapshot(snap).top_sites[0].site.endswith("pytorch_backend.py:190 allocate")


def test_gzip_and_bytes_sources(tmp_path: Path) -> None:
    import gzip

    raw = sample("mlsys_profile_grad.pkl").read_bytes()
    gz = tmp_path / "snap.pickle.gz"
    gz.write_bytes(gzip.compress(raw))
    assert load_snapshot(gz) == load_snapshot(raw)


# -------------------------------------------------------------------- enginesim


def _rank(*, leak: bool = False, late: bool = True, oom: bool = False) -> RankMemory:
    warm = tuple(
        GraphCapture(100.0 + i * 0.2, n, 24 * MiB, after_warmup=False)
        for i, n in enumerate((1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
    )
    late_caps = tuple(
        GraphCapture(t * HOUR, 401, 2 * GiB, after_warmup=True) for t in (10.0, 21.0, 31.0)
    )
    leaked = tuple((60.0 + 60.0 * k, 128 * MiB * k) for k in range(1, 48 * 60)) if leak else ()
    return RankMemory(
        device=0,
        total_bytes=85018279936,
        weights_bytes=35 * 10**9,
        kv_pool_bytes=35 * GiB,
        activation_peak_bytes=3 * GiB,
        graph_captures=warm + (late_caps if late else ()),
        leaked_bytes=leaked,
        oom_at_s=40 * HOUR if oom else None,
        now_s=48 * HOUR,
    )


@pytest.mark.parametrize("max_entries", [500, 30000])
def test_backward_reconstruction_matches_simulator_truth(max_entries: int) -> None:
    rank = _rank(oom=True)
    kw = {"max_entries": max_entries, "churn_interval_s": None}
    snap = validate(build_memory_snapshot(rank, **kw))
    entries = snap.device_traces[0]
    final = _final_state(snap.segments)
    curve = reconstruct(
        entries, final["reserved"], final["allocated"], final["pools"], _PoolIndex(snap.segments)
    )
    assert curve.timed
    checked = 0
    for i, t_us in enumerate(curve.x):
        if i + 1 < len(curve.x) and curve.x[i + 1] == t_us:
            continue  # several events at one instant: the truth is the state after the last
        truth = expected_totals(rank, (t_us - EPOCH_US) / 1e6, **kw)
        assert (curve.reserved[i], curve.allocated[i]) == truth
        checked += 1
    assert checked > max_entries // 10


def test_reserved_steps_and_graph_pool_growth_on_simulated_captures() -> None:
    snap = validate(build_memory_snapshot(_rank(), max_entries=30000, churn_interval_s=None))
    out = analyse_snapshot(snap).as_dict()
    graph_steps = [s for s in out["steps"] if s["graph_pool"]]
    assert [s["pool"] for s in graph_steps] == ["0,2", "0,3", "0,4"]
    for s, hours in zip(graph_steps, (10, 21, 31), strict=True):
        assert abs(s["bytes"] - 2 * GiB) <= 4 * MiB
        assert abs(s["x_start"] - (EPOCH_US + hours * HOUR * 1e6)) <= 1e6
    assert out["signals"]["artifact_graph_pool_growth_bytes"] >= 6 * GiB
    assert [f["key"] for f in out["findings"]] == ["cuda-graph-pool-growth"]
    pools = out["timeline"]["0"]["pools"]
    assert set(pools) >= {"0,2", "0,3", "0,4"}
    assert max(pools["0,2"]) >= 2 * GiB and pools["0,2"][0] == 0
    assert len(out["timeline"]["0"]["x"]) <= 2000


def test_simulated_leak_is_found_with_its_slope() -> None:
    snap = validate(
        build_memory_snapshot(
            _rank(leak=True, late=False), max_entries=20000, churn_interval_s=None
        )
    )
    out = analyse_snapshot(snap).as_dict()
    assert [f["key"] for f in out["findings"]] == ["allocator-leak"]
    slope = out["signals"]["artifact_allocated_slope_bytes_per_s"]
    assert abs(slope - 128 * MiB / 60) < 0.1 * 128 * MiB / 60
    assert any(s["site"].endswith(":1124 _prepare_inputs") for s in out["top_sites"][:3])


# Scenario snapshots straight from the simulator's engine (as /profiler/memory_snapshot).
def _scenario_snapshot(name: str, seconds: float) -> bytes:
    from enginesim import profiling
    from enginesim.deployment import Deployment, SimClock

    d = Deployment(name, clock=SimClock("manual"))
    d.advance(seconds)
    return profiling.memory_snapshot(d.engines[0], 0)


@pytest.fixture(scope="module")
def scenarios() -> dict[str, dict]:
    runs = {
        "healthy": ("healthy", 600.0),
        "graph-pool-growth": ("graph-pool-growth", 300.0),
        "graph-pool-growth-oom": ("graph-pool-growth", 320.0),
        "allocator-leak": ("allocator-leak", 250.0),
        "allocator-leak-oom": ("allocator-leak", 300.0),
    }
    return {
        key: analyse_snapshot(load_snapshot(_scenario_snapshot(*args))).as_dict()
        for key, args in runs.items()
    }


@pytest.mark.slow
def test_healthy_scenario_has_no_findings(scenarios: dict[str, dict]) -> None:
    out = scenarios["healthy"]
    assert out["findings"] == []
    # The trace still holds start-up: the warm-up captures grow the pool, but stay small.
    assert 0 < out["signals"]["artifact_graph_pool_growth_bytes"] < GiB
    assert 0 < out["graph_pool_bytes"] < GiB  # the warm-up pool only


@pytest.mark.slow
@pytest.mark.parametrize("key", ["graph-pool-growth", "graph-pool-growth-oom"])
def test_graph_pool_growth_scenario(scenarios: dict[str, dict], key: str) -> None:
    out = scenarios[key]
    keys = [f["key"] for f in out["findings"]]
    assert keys[0] == "cuda-graph-pool-growth"
    assert "allocator-leak" not in keys
    assert out["graph_pool_bytes"] > 4 * GiB
    graph_steps = [s for s in out["steps"] if s["graph_pool"]]
    assert len(graph_steps) == 2
    assert all(1.5 * GiB <= s["bytes"] <= 2.5 * GiB for s in graph_steps)
    if key.endswith("oom"):
        assert keys == ["cuda-graph-pool-growth", "oom"]
        oom = out["ooms"][0]
        assert oom["requested_bytes"] > oom["device_free_bytes"]
        assert out["signals"]["artifact_oom_count"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("key", ["allocator-leak", "allocator-leak-oom"])
def test_allocator_leak_scenario(scenarios: dict[str, dict], key: str) -> None:
    out = scenarios[key]
    keys = [f["key"] for f in out["findings"]]
    assert keys[0] == "allocator-leak"
    assert "cuda-graph-pool-growth" not in keys
    sig = out["signals"]
    assert sig["artifact_leak_fraction"] >= 0.9
    assert abs(sig["artifact_allocated_slope_bytes_per_s"] - 24 * MiB) < 3 * MiB
    assert any(s["site"].endswith("_prepare_inputs") for s in out["top_sites"][:3])
    assert (keys == ["allocator-leak", "oom"]) == key.endswith("oom")


@pytest.mark.slow
def test_as_dict_contract(scenarios: dict[str, dict]) -> None:
    out = scenarios["graph-pool-growth-oom"]
    for k in ("kind", "reserved_bytes", "allocated_bytes", "graph_pool_bytes", "devices",
              "steps", "timeline", "top_sites", "ooms", "findings", "signals"):  # fmt: skip
        assert k in out
    assert out["kind"] == "memory-snapshot"
    assert set(out["signals"]) >= {
        "artifact_graph_pool_bytes", "artifact_graph_pool_growth_bytes",
        "artifact_reserved_step_count", "artifact_reserved_step_max_bytes",
        "artifact_allocated_growth_bytes", "artifact_leak_fraction", "artifact_oom_count",
        "artifact_reserved_gap_bytes",
    }  # fmt: skip
    for f in out["findings"]:
        assert set(f) == {"key", "title", "detail", "values"}
    json.dumps(out)


# ---------------------------------------------------------------------- schema


def _reject(obj: object) -> str:
    with pytest.raises(ArtifactRejected) as info:
        load_snapshot(io.BytesIO(pickle.dumps(obj, protocol=4)))
    return info.value.reason


def _good() -> dict:
    return build_memory_snapshot(_rank(late=False), max_entries=50)


def test_wrong_schema_names_the_bad_field() -> None:
    assert _reject([1, 2, 3]) == "segments[0] is not a dict (got int)"
    assert _reject({"device_traces": []}).startswith("not a memory snapshot: the dict has no")
    assert _reject("text") == "not a memory snapshot: top level is a str"
    snap = _good()
    snap["segments"][3]["blocks"][0]["size"] = "12"
    assert _reject(snap) == "segments[3].blocks[0].size is not an integer (got str)"
    snap = _good()
    snap["device_traces"][0][7]["time_us"] = 1.5
    assert _reject(snap) == "device_traces[0][7].time_us is not an integer (got float)"
    snap = _good()
    snap["segments"][0]["segment_pool_id"] = [0, 0]
    assert _reject(snap) == "segments[0].segment_pool_id is not a pair of integers"
    snap = _good()
    del snap["segments"][1]["total_size"]
    assert _reject(snap) == "segments[1] has no 'total_size'"
    snap = _good()
    snap["segments"][0]["frames"][0]["line"] = None
    # frame lists are shared: the first place that holds it is named
    assert _reject(snap) == "segments[0].blocks[0].frames[0] has no 'line'"


def test_self_reference_and_shared_blow_up() -> None:
    loop: list = []
    loop.append(loop)
    # validate() is the structure walk of load_snapshot (safepickle's generic one is off)
    assert _reject(loop) == "segments[0] refers back to its container (cycle)"
    # One segment with 2,000 blocks, listed 20,000 times: 40 M blocks from a small file.
    seg = _good()["segments"][0]
    seg["blocks"] = seg["blocks"] * 2000
    data = pickle.dumps([seg] * 20000, protocol=4)
    with pytest.raises(ArtifactRejected, match=r"segments\[0\]\.blocks\[\d+\] repeats an"):
        load_snapshot(io.BytesIO(data))
    seg["blocks"] = seg["blocks"][:1]
    data = pickle.dumps([seg] * 20000, protocol=4)
    with pytest.raises(ArtifactRejected, match=r"segments\[1\] repeats an object seen earlier"):
        load_snapshot(io.BytesIO(data))
    # and the node budget still bounds honest-looking but huge inputs
    fresh = [{**seg, "blocks": [dict(b) for b in seg["blocks"]]} for _ in range(3000)]
    with pytest.raises(ArtifactRejected, match="expands to more than 1,000"):
        load_snapshot(io.BytesIO(pickle.dumps(fresh, protocol=4)), max_nodes=1000)


def test_module_has_no_torch_or_django_import() -> None:
    # Django is also kept out by an import contract (pyproject.toml), indirect imports too.
    import artifacts.memory_analysis as ma
    import artifacts.memory_snapshot as ms
    import artifacts.safepickle as sp

    for mod in (ms, ma, sp):
        text = Path(mod.__file__).read_text()
        assert "import torch" not in text
        assert "import django" not in text and "from django" not in text
