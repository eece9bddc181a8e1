"""The load generator against a small local streaming server: what it sends, what it times,
and how it bounds itself (in-flight cap, request timeout, run deadline, loopback only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.client import TargetRefused, check_target, run_plan
from loadgen.plan import LengthMix, PlannedRequest, poisson_plan
from loadgen.report import summarize
from tests.loadgen.fake_engine import Behaviour, fake_engine

ROOT = Path(__file__).resolve().parents[2]


def test_every_planned_request_is_sent_and_timed():
    plan = poisson_plan(
        50.0, prompt=LengthMix.parse("5-40"), output=LengthMix.parse("2-6"), seed=1, count=30,
        priorities=((1, 0), (1, -2)),
    )  # fmt: skip
    with fake_engine() as (url, seen):
        result = run_plan(plan, url, model="m", seed=1, request_timeout_s=20)
    report = summarize(result.outcomes, result.wall_s)
    assert report["statuses"] == {"ok": 30}
    assert report["output_tokens_received"] == sum(r.max_tokens for r in plan)
    assert sorted(len(b["prompt"]) for b in seen.bodies) == sorted(r.prompt_tokens for r in plan)
    assert {b.get("priority", 0) for b in seen.bodies} == {0, -2}
    assert all(b["stream"] and b["ignore_eos"] and b["model"] == "m" for b in seen.bodies)
    for o in result.outcomes:
        assert o.ttft_s is not None and o.e2e_s is not None and o.ttft_s <= o.e2e_s
        assert len(o.itl_s) == o.max_tokens - 1  # one gap per token after the first
        assert o.finish_reason == "length"


def test_no_request_rides_a_connection_the_server_may_be_closing():
    """vLLM's server (uvicorn) closes a kept-alive connection after 5 s idle, and httpx kept
    one for 5 s: a request sent on an idle connection as the server closed it ended in a
    ReadError (1 stream in ~240 on the busy machine). A POST cannot be retried (the engine
    may already be generating it), so no request reuses a connection: one stream, one
    connection. The fake server answers every reused connection's request by closing it."""
    plan = [PlannedRequest(seq=i, at_s=0.05 * i, prompt_tokens=4, max_tokens=3) for i in range(20)]
    with fake_engine(Behaviour(keep_alive_race=True)) as (url, seen):
        result = run_plan(plan, url, model="m", request_timeout_s=20)
    report = summarize(result.outcomes, result.wall_s)
    assert report["statuses"] == {"ok": 20}, [o.error for o in result.outcomes]
    assert seen.connections == 20


def test_coalesced_chunks_spread_the_gap_over_their_tokens():
    plan = [PlannedRequest(0, 0.0, 8, 9)]
    with fake_engine(Behaviour(tokens_per_chunk=3)) as (url, _):
        (outcome,) = run_plan(plan, url, model="m").outcomes
    assert outcome.output_tokens == 9
    # One gap per token after the first: two that came with it (no gap), then chunks 2 and
    # 3 spread their gap over the three tokens each carries.
    assert len(outcome.itl_s) == 8
    assert outcome.itl_s[:2] == [0.0, 0.0]
    assert outcome.itl_s[2] == outcome.itl_s[3] == outcome.itl_s[4]


def test_errors_are_reported_not_timed():
    plan = [PlannedRequest(0, 0.0, 8, 3), PlannedRequest(1, 0.0, 13, 3)]
    with fake_engine(Behaviour(fail_prompt_len=13)) as (url, _):
        result = run_plan(plan, url, model="m")
    by_seq = {o.seq: o for o in result.outcomes}
    assert by_seq[0].status == "ok"
    assert by_seq[1].status == "error"
    assert by_seq[1].http_status == 503
    assert by_seq[1].ttft_s is None
    assert "overloaded" in by_seq[1].error


def test_a_hung_request_times_out_and_the_deadline_cancels_the_rest():
    plan = [PlannedRequest(0, 0.0, 21, 3), PlannedRequest(1, 0.0, 8, 2)]
    with fake_engine(Behaviour(hang_prompt_len=21)) as (url, _):
        timed = run_plan(plan, url, model="m", request_timeout_s=0.5)
        cut = run_plan(plan, url, model="m", request_timeout_s=30, deadline_s=0.5)
    assert [o.status for o in timed.outcomes] == ["error", "ok"]
    assert "timed out" in timed.outcomes[0].error
    assert [o.status for o in cut.outcomes] == ["cancelled", "ok"]


def test_in_flight_cap_skips_rather_than_delays():
    plan = [PlannedRequest(i, 0.0, 21, 3) for i in range(3)]
    with fake_engine(Behaviour(hang_prompt_len=21)) as (url, _):
        result = run_plan(plan, url, model="m", max_in_flight=1, deadline_s=0.3)
    statuses = [o.status for o in result.outcomes]
    assert statuses == ["cancelled", "skipped", "skipped"]
    assert result.outcomes[1].sent_at_s is None


@pytest.mark.parametrize(
    "url", ["http://10.0.0.1:8000", "http://example.com/v1/completions", "ftp://127.0.0.1/"]
)
def test_only_loopback_unless_allowed(url):
    with pytest.raises(TargetRefused):
        check_target(url)


def test_target_url_forms():
    assert check_target("http://127.0.0.1:9/") == "http://127.0.0.1:9/v1/completions"
    assert check_target("http://[::1]:9/v1/completions") == "http://[::1]:9/v1/completions"
    assert check_target("http://10.1.2.3:9", allow_remote=True).endswith("/v1/completions")


def test_cli_plans_records_and_replays(tmp_path):
    trace = tmp_path / "plan.jsonl"
    cli = [sys.executable, "-m", "loadgen"]
    dry = subprocess.run(
        [*cli, "--rate", "20", "--count", "12", "--prompt", "4-9", "--output", "2",
         "--seed", "4", "--plan-out", str(trace), "--dry-run"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(dry.stdout)["planned"] == 12
    assert len(trace.read_text().splitlines()) == 12
    with fake_engine() as (url, seen):
        done = subprocess.run(
            [*cli, "--url", url, "--trace", str(trace), "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["statuses"] == {"ok": 12}
    assert report["output_tokens_received"] == 24
    assert len(seen.bodies) == 12
    refused = subprocess.run(
        [*cli, "--url", "http://192.0.2.1:80", "--rate", "1", "--count", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "loopback" in refused.stderr
