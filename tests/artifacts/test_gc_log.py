"""gc DEBUG_STATS parsing across Python versions, timestamps, and the gc-pauses cause."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from artifacts.bounded import Limits
from artifacts.errors import ArtifactRejected
from artifacts.gc_log import (
    analyse_gc_log,
    correlate_spikes,
    parse_gc_log,
    parse_gc_text,
    parse_timestamp,
)
from enginesim import profiling
from enginesim.artifacts import GcPause, gc_pause_lines, render_gc_log, sglang_line, vllm_line
from enginesim.deployment import Deployment, SimClock

START = datetime(2026, 1, 5, 8, 0, 0)
START_UNIX = START.replace(tzinfo=UTC).timestamp()
PAUSE = GcPause(time_s=12.5, generation=2, duration_s=0.1234, collected=4120, uncollectable=3)


def _stamped(pauses: list[GcPause], seconds: int, version: str = "3.11") -> str:
    def line(t: int) -> str:
        at = START + timedelta(seconds=t)
        return vllm_line(at, "INFO", "loggers.py", 236, "Engine 000: x", process="APIServer", pid=1)

    stats = [(float(t), line(t)) for t in range(seconds + 1)]
    return render_gc_log(
        pauses, interleave_with=stats, python_version=version, prefix="(EngineCore_DP0 pid=241) "
    )


@pytest.mark.parametrize("version", ["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"])
def test_classic_block_parses(version: str) -> None:
    log = parse_gc_text("\n".join(gc_pause_lines(PAUSE, python_version=version)))
    (c,) = log.collections
    assert c.generation == 2 and c.elapsed_s == pytest.approx(0.1234)
    assert (c.unreachable, c.uncollectable) == (4123, 3)
    assert len(c.objects) == 3 and not c.duration_estimated


def test_incremental_collector_without_done_line_is_estimated() -> None:
    text = _stamped([PAUSE], 20, version="3.14")
    log = parse_gc_text(text, year=2026)
    (c,) = log.collections
    assert c.elapsed_s is not None and c.duration_estimated
    assert c.time == START_UNIX + 12 and c.time_hi == START_UNIX + 13
    assert analyse_gc_log(log).overall["estimated_durations"] == 1


def test_done_line_variants() -> None:
    text = "\n".join([
        "gc: collecting generation 1...",
        "gc: done, 0.0100s elapsed",
        "gc: collecting generation 0...",
        "gc: done, 12 unreachable, 0 uncollectable",
        "gc: collecting young generation...",
        "gc: collecting generation 2...",
        "gc: objects in each generation: 1 2 3",
        "gc: done, 5 unreachable, 1 uncollectable, 0.2500s elapsed",
    ])  # fmt: skip
    cols = parse_gc_text(text).collections
    assert [c.generation for c in cols] == [1, 0, 0, 2]
    assert cols[0].elapsed_s == 0.01 and cols[1].elapsed_s is None and cols[1].unreachable == 12
    assert cols[3].elapsed_s == 0.25 and cols[3].objects == (1, 2, 3)


def test_timestamp_formats() -> None:
    y = 2026
    vllm = vllm_line(START, "WARNING", "core.py", 1, "x", process="EngineCore_DP0", pid=3)
    assert parse_timestamp(vllm, y) == START_UNIX
    assert parse_timestamp("INFO 01-05 08:00:00 core.py:12] v0 shape", y) == START_UNIX
    assert parse_timestamp("2026-01-05T08:00:00.250Z something", y) == START_UNIX + 0.25
    assert parse_timestamp("2026-01-05 08:00:00,5 - root - INFO", y) == START_UNIX + 0.5
    assert parse_timestamp(sglang_line(START, "Decode batch"), y) == START_UNIX
    assert parse_timestamp("gc: done, 1 unreachable", y) is None
    assert parse_timestamp("INFO 13-45 08:00:00 [x.py:1] bad date", y) is None


def test_collections_are_placed_between_timestamped_lines() -> None:
    log = parse_gc_text(_stamped([PAUSE, GcPause(14.2, 0, 0.0001, 10, 0)], 20), year=2026)
    first, second = log.collections
    assert first.time == START_UNIX + 12 and first.time_hi == START_UNIX + 13
    assert second.time == START_UNIX + 14
    assert log.first_time == START_UNIX and log.last_time == START_UNIX + 20


def _engine_pauses(scenario: str) -> list[GcPause]:
    d = Deployment(scenario, clock=SimClock("manual"), seed=0)
    d.advance(120)
    return [GcPause(*p) for p in d.replicas[0].engine.gc_pauses]


def test_gc_pauses_scenario_names_the_cause_and_explains_spikes() -> None:
    pauses = _engine_pauses("gc-pauses")
    log = parse_gc_text(_stamped(pauses, 120), year=2026)
    # ITL observations: 45 ms normally, ~170 ms when a gen-2 collection ran.
    points = [(START_UNIX + i * 0.25, 0.045) for i in range(480)]
    points += [(START_UNIX + p.time_s + 0.05, 0.17) for p in pauses if p.generation == 2]
    result = analyse_gc_log(log, latencies=points).as_dict()
    (finding,) = result["findings"]
    assert finding["key"] == "gc-pauses"
    v = finding["values"]
    assert v["generation"] == 2 and v["long_pauses"] >= 20
    assert v["pause_p50_ms"] == pytest.approx(120.0, rel=0.1)
    assert v["share_of_spikes_explained"] == 1.0
    s = result["signals"]
    assert s["artifact_gc_gen2_pause_max_ms"] >= 100.0
    assert s["artifact_gc_pause_max_ms"] == s["artifact_gc_gen2_pause_max_ms"]
    assert s["artifact_gc_pauses_per_min"] > 100.0
    assert s["artifact_gc_spike_share"] == 1.0
    assert result["by_generation"]["2"]["count"] == v["long_pauses"]


def test_engine_gc_log_endpoint_output_is_timed_by_the_engine_lines() -> None:
    d = Deployment("gc-pauses", clock=SimClock("manual"), seed=0)
    d.advance(60)
    text = profiling.gc_log(d.replicas[0].engine)
    result = analyse_gc_log(parse_gc_text(text, year=2026)).as_dict()
    assert [f["key"] for f in result["findings"]] == ["gc-pauses"]
    assert result["signals"]["artifact_gc_pauses_per_min"] > 0
    assert result["notes"] == []


def test_a_gc_log_without_timestamped_lines_still_finds_long_pauses() -> None:
    d = Deployment("gc-pauses", clock=SimClock("manual"), seed=0)
    d.advance(60)
    bare = "\n".join(
        line
        for line in profiling.gc_log(d.replicas[0].engine).splitlines()
        if line.split(") ", 1)[-1].startswith("gc:")
    )
    result = analyse_gc_log(parse_gc_text(bare)).as_dict()
    assert [f["key"] for f in result["findings"]] == ["gc-pauses"]
    assert "artifact_gc_pauses_per_min" not in result["signals"]
    assert result["notes"] == ["no timestamped lines: collections cannot be placed in time"]


def test_healthy_gc_log_has_no_finding() -> None:
    pauses = _engine_pauses("healthy")
    result = analyse_gc_log(parse_gc_text(_stamped(pauses, 120), year=2026)).as_dict()
    assert result["findings"] == []
    assert result["signals"]["artifact_gc_pause_max_ms"] < 5.0


def test_spike_correlation_counts() -> None:
    log = parse_gc_text(_stamped([PAUSE], 30), year=2026)
    points = [(START_UNIX + t, 0.05) for t in range(30)]
    points += [(START_UNIX + 12.6, 0.2), (START_UNIX + 25.0, 0.2)]
    out = correlate_spikes(log.collections, points)
    assert out["spikes"] == 2 and out["spikes_in_pause_window"] == 1
    assert out["share_explained"] == 0.5
    assert correlate_spikes(log.collections, [])["share_explained"] is None


def test_file_input_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "stderr.log.gz"
    body = _stamped([PAUSE], 20).encode() + b"\xff\xfe junk\n" + b"x" * 200_000 + b"\n"
    path.write_bytes(gzip.compress(body))
    log = parse_gc_log(path, year=2026)
    assert len(log.collections) == 1 and log.long_lines == 1
    with pytest.raises(ArtifactRejected, match="limit"):
        parse_gc_log(path, limits=Limits(max_file_bytes=100), year=2026)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(ArtifactRejected, match="empty"):
        parse_gc_log(empty)
