"""No zero-count check passes on a log with unrecognised error lines: built from real
lines (../shared/samples/real/vllm_logs), read by the log probe, evaluated by the playbook."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from deployments.budget import Budget
from investigations.evaluation import evaluate, reduce
from investigations.playbook import get_playbook
from probes import observe
from probes.parsing.logevents import FollowerState
from tests.support.samples import SAMPLES, samples_absent

REAL = SAMPLES / "real" / "vllm_logs"
START = datetime(2026, 1, 1, 16, 10, tzinfo=UTC)

pytestmark = pytest.mark.skipif(samples_absent(REAL), reason="shared real samples absent")


def _view(chunks: list[bytes]) -> tuple[dict, float]:
    """Each chunk is one poll cycle 5 s apart, as the worker would store them."""
    state, series = FollowerState(), {}
    t = START.timestamp()
    for chunk in chunks:
        at = datetime.fromtimestamp(t, tz=UTC)
        state, seen = observe.observe_log(state, chunk, at)
        for signal, labels, value in seen.observations:
            key = "target=log" + (f",{labels}" if labels else "")
            series.setdefault(("log", signal), {}).setdefault(key, []).append((t, value))
        t += 5
    return {k: list(v.items()) for k, v in series.items()}, t


def _healthy_start_up() -> bytes:
    return (REAL / "v1_0.11.0_nv25.11_startup_bulleted_paste.log").read_bytes()


def _traceback_without_its_exception() -> bytes:
    """The API server's traceback of a real runtime OOM, the OOM line itself left out."""
    lines = (REAL / "v1_runtime_oom_enginecore_asyncllm.log").read_bytes().splitlines()
    return b"\n".join(lines[2:]) + b"\n"


def test_zero_ooms_hold_only_while_every_error_line_was_recognised():
    playbook, budget = get_playbook("gpu-oom"), Budget()
    clean, now = _view([_healthy_start_up(), b"", b""])
    result = evaluate(playbook, budget, clean, now)
    assert result.alarm.firing is False and result.alarm.measured == 0

    dirty, now = _view([_healthy_start_up(), _traceback_without_its_exception(), b""])
    result = evaluate(playbook, budget, dirty, now)
    assert result.alarm.firing is None and result.alarm.measured is None
    # The other cycles' zeros do not add up to "no OOM" either.
    growth = next(node for node in playbook.walk() if node.key == "cuda-graph-pool-growth")
    verify = growth.fix.verify[1].measure  # "No CUDA OOM since the fix took effect"
    assert reduce(verify, dirty, now) is None
    assert reduce(verify, clean, now) == 0


def test_the_check_says_why_it_has_no_count():
    playbook = get_playbook("gpu-oom")
    # A real log that ends with warm-up done (stats) so "captures after warm-up" is counted.
    stats = (REAL / "v1_2026_mtp_kv96_waiting43.log").read_bytes()
    clean, now = _view([stats, b""])
    late = evaluate(playbook, Budget(), clean, now).find("cuda-graph-pool-growth").checks[0]
    assert late.outcome == "eliminate" and late.measured == 0

    dirty, now = _view([stats, _traceback_without_its_exception()])
    late = evaluate(playbook, Budget(), dirty, now).find("cuda-graph-pool-growth").checks[0]
    assert late.outcome == "inconclusive" and late.measured is None
    assert "looked like errors no known event matches" in late.reason


def test_a_positive_count_stays_evidence_beside_unrecognised_lines():
    oom = (REAL / "v1_runtime_oom_enginecore_asyncllm.log").read_bytes()
    view, now = _view([_healthy_start_up(), oom])
    result = evaluate(get_playbook("gpu-oom"), Budget(), view, now)
    assert result.alarm.firing is True and result.alarm.measured == 1
