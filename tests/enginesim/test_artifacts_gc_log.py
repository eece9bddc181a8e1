"""Simulated GC DEBUG_STATS output must parse with the CPython line shapes."""

from __future__ import annotations

import re

import pytest

from enginesim.artifacts import GcPause, gc_pause_lines, render_gc_log

COLLECTING = re.compile(r"^gc: collecting generation (?P<gen>[012])\.\.\.$")
EACH = re.compile(r"^gc: objects in each generation: (\d+) (\d+) (\d+)$")
PERMANENT = re.compile(r"^gc: objects in permanent generation: (\d+)$")
DONE = re.compile(
    r"^gc: done, (?P<unreachable>\d+) unreachable, (?P<uncollectable>\d+) uncollectable, "
    r"(?P<elapsed>\d+\.\d{4})s elapsed$"
)
VLLM_TS = re.compile(r"^\(APIServer pid=1\) INFO (\d\d-\d\d \d\d:\d\d:\d\d) ")

PAUSE = GcPause(time_s=12.5, generation=2, duration_s=0.1234, collected=4120, uncollectable=3)


@pytest.mark.parametrize("version", ["3.8", "3.11", "3.12", "3.13"])
def test_classic_collector_block(version: str) -> None:
    lines = gc_pause_lines(PAUSE, python_version=version)
    assert [
        bool(p.match(line))
        for p, line in zip((COLLECTING, EACH, PERMANENT, DONE), lines, strict=True)
    ] == [True] * 4
    done = DONE.match(lines[3])
    assert done is not None
    assert int(done["unreachable"]) == 4123 and int(done["uncollectable"]) == 3
    assert float(done["elapsed"]) == pytest.approx(0.1234)
    assert COLLECTING.match(lines[0])["gen"] == "2"  # type: ignore[index]


def test_incremental_collector_has_no_done_line() -> None:
    lines = gc_pause_lines(PAUSE, python_version="3.14")
    assert len(lines) == 3
    assert COLLECTING.match(lines[0]) and EACH.match(lines[1]) and PERMANENT.match(lines[2])
    with pytest.raises(ValueError):
        gc_pause_lines(PAUSE, python_version="3.7")


def test_interleaves_with_timestamped_lines_in_time_order() -> None:
    stats = [
        (10.0, "(APIServer pid=1) INFO 02-12 19:50:19 [loggers.py:236] Engine 000: a"),
        (12.6, "(APIServer pid=1) INFO 02-12 19:50:21 [loggers.py:236] Engine 000: b"),
        (15.0, "(APIServer pid=1) INFO 02-12 19:50:24 [loggers.py:236] Engine 000: c"),
    ]
    pauses = [PAUSE, GcPause(14.0, 0, 0.002, 10, 0)]
    text = render_gc_log(pauses, interleave_with=stats, prefix="(EngineCore_DP0 pid=241) ")
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == 3 + 8
    kinds = ["stats" if VLLM_TS.match(line) else "gc" for line in lines]
    # line b was stamped while the 123 ms collection ran, so it lands after the block
    assert kinds == ["stats"] + ["gc"] * 4 + ["stats"] + ["gc"] * 4 + ["stats"]
    gc_lines = [line.removeprefix("(EngineCore_DP0 pid=241) ") for line in lines if "gc:" in line]
    assert all(any(p.match(x) for p in (COLLECTING, EACH, PERMANENT, DONE)) for x in gc_lines)
    assert render_gc_log(pauses) == render_gc_log(pauses)
    assert render_gc_log([]) == ""
