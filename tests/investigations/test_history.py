"""History before the alarm: an investigation opened after the peak still sees the minutes
before it. A real Prometheus scrapes the simulator's slow router; opening the investigation
backfills the router check's window from range queries, as ordinary observations at their
own times, which the evaluation at the instant of opening reads with no live poll at all.
Retention keeps the light polls of the hour before an open and prunes the rest."""

from __future__ import annotations

import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from deployments.models import Deployment
from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from investigations import actions, history, live, panels
from investigations.history import backfill_jobs
from investigations.models import Investigation
from investigations.playbook import get_playbook
from investigations.tasks import backfill_history
from probes import retention
from probes.backfill import RangeJob, backfill
from probes.engine_promql import STANDS_IN
from probes.models import Observation, Poll, Target, TargetKind
from probes.policy import fetch_policy
from probes.tasks import poll_light
from tests.support.prometheus import prometheus, wait_for_series

ROUTER = "router_forward_p95"
LIGHT_S = 30


def test_jobs_cover_each_prometheus_window_on_the_poll_grid():
    playbook = get_playbook("high-ttft")
    opened = 1_700_000_003.7
    jobs = {j.signal: j for j in backfill_jobs(playbook, opened_at=opened, step_s=5, lead_s=900)}
    job = jobs[ROUTER]
    assert "router_forward_duration_seconds_bucket" in job.promql
    assert job.start % 5 == 0 and opened - 905 < job.start <= opened - 900  # the chart lead
    assert job.end == opened and job.step_s == 5
    short = {j.signal: j for j in backfill_jobs(playbook, opened_at=opened, step_s=5)}[ROUTER]
    assert short.start <= opened - 300 < short.start + 5  # the check's own window
    # The engine signals the playbook reads that Prometheus stands in for (a deployment
    # whose engines only Prometheus reaches), by vLLM's own names; and nothing else.
    assert jobs["kv_cache_usage"].promql == "max(vllm:kv_cache_usage_perc)"
    assert "vllm:num_preemptions_total" in jobs["preemptions_rate"].promql
    assert set(jobs) - {ROUTER} <= set(STANDS_IN)
    assert {"kv_cache_usage", "preemptions_rate", "requests_waiting", "ttft_p95"} <= set(jobs)
    # ... with the engine inputs of the expectations (the KV the running requests hold).
    assert jobs["requests_running"].promql == "sum(vllm:num_requests_running)"


@pytest.mark.slow
@pytest.mark.django_db
def test_opening_backfills_the_window_from_a_real_prometheus(
    tmp_path, make_deployment, django_capture_on_commit_callbacks
):
    server = SimServer(
        SimDeployment("router-slow", seed=0, clock=SimClock("realtime", 20.0))
    ).start_in_thread()
    target = f"127.0.0.1:{server.ports['main']}"
    try:
        jobs = [("router", "/router/metrics"), ("vllm", "/metrics")]
        with prometheus(tmp_path, target, jobs) as prom:
            wait_for_series(prom, "rate(router_forward_duration_seconds_count[1m]) > 0")
            time.sleep(8)  # history before the open: eight scrapes at 1 s
            deployment = make_deployment("router-slow", poll_interval_s=1)
            source = Target.objects.create(
                deployment=deployment, kind=TargetKind.PROMETHEUS, url=prom
            )
            with django_capture_on_commit_callbacks(execute=False) as scheduled:
                investigation = actions.open_investigation(
                    deployment=deployment, symptom="high-ttft", user=None
                )
            # The backfill is sent once the open has committed, for a worker to run.
            (sent,) = [c for c in scheduled if getattr(c, "func", None) is history.schedule]
            assert sent.args == (investigation.pk,)
            written = backfill_history.apply(args=[str(investigation.pk)]).get()
            again = backfill_history.apply(args=[str(investigation.pk)]).get()
    finally:
        server.stop()
    opened = investigation.opened_at
    rows = list(
        Observation.objects.filter(target=source, signal=ROUTER)
        .order_by("taken_at")
        .values_list("taken_at", "value")
    )
    # Everything written is the router's history and the simulated engine's, which this
    # Prometheus also scrapes (the engine signals it stands in for).
    assert written == Observation.objects.filter(target=source).count() and len(rows) >= 5, rows
    stood_in = set(Observation.objects.filter(target=source).values_list("signal", flat=True))
    assert {"kv_cache_usage", "requests_waiting"} <= stood_in <= {ROUTER, *STANDS_IN}
    assert again == 0  # a replay writes nothing twice
    assert all(at < opened for at, _ in rows)
    assert all(at.timestamp() % 1 == 0 for at, _ in rows)  # on the 1 s poll grid
    assert all(value > 0.05 for _, value in rows), rows  # the slow router, before the open
    # Evaluated at the very instant of opening, before any live poll: the router check
    # already has a span of data behind it.
    fresh = Investigation.objects.get(pk=investigation.pk)
    playbook = get_playbook("high-ttft")
    state = live.current_state(
        fresh, now=opened, extra_signals=panels.chart_signals(fresh, playbook, opened)
    )
    (router,) = state.result.find("router-latency").checks
    assert router.measured is not None and router.measured > 0.05, router
    # ... and the span rules see the backfilled points as what they are: samples over time.
    assert router.samples == len(rows)
    assert router.span_s == (rows[-1][0] - rows[0][0]).total_seconds() >= 4
    # The page's chart of that check draws the minutes before the open.
    cards = panels.evidence_cards(fresh, playbook, state.result, state.observations, opened)
    (chart,) = next(c for c in cards if c["key"] == "router-latency")["charts"]
    drawn = [x for trace in chart["figure"]["data"] for x in trace["x"]]
    assert len(drawn) == len(rows) and max(drawn) < opened.timestamp() * 1000


@pytest.mark.django_db
def test_a_prometheus_that_does_not_answer_writes_nothing(make_deployment):
    deployment = make_deployment("no-prom")
    target = Target.objects.create(
        deployment=deployment, kind=TargetKind.PROMETHEUS, url="http://127.0.0.1:9"
    )
    now = time.time()
    done = backfill(target, [RangeJob(ROUTER, "up", now - 60, now, 5)], fetch_policy())
    assert done.total == 0 and set(done.errors) == {ROUTER}
    assert not Observation.objects.exists()


@pytest.mark.django_db
def test_retention_keeps_the_light_polls_of_the_hour_before_an_open(make_deployment):
    deployment = make_deployment("light")
    engine = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://127.0.0.1:9/metrics"
    )
    now = timezone.now().replace(microsecond=0)
    opened = now - timedelta(hours=72)
    before = [opened - timedelta(minutes=m) for m in (1, 10, 59)]  # light polls, 30 s grid
    stale = [opened - timedelta(hours=3), now - timedelta(hours=49)]
    for at in before + stale:
        Poll.objects.create(target=engine, cycle_at=at, ok=True)
        Observation.objects.create(target=engine, taken_at=at, signal="requests_waiting", value=1)
    Investigation.objects.create(
        team=deployment.team, deployment=deployment, symptom="high-ttft", title="t"
    )
    Investigation.objects.filter(deployment=deployment).update(
        opened_at=opened, closed_at=opened + timedelta(hours=1), status=Investigation.Status.CLOSED
    )
    retention.prune(timedelta(hours=settings.ATLAS_RAW_RETENTION_HOURS), now=now)
    kept = sorted(Poll.objects.values_list("cycle_at", flat=True))
    assert kept == sorted(before)
    assert sorted(Observation.objects.values_list("taken_at", flat=True)) == sorted(before)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_investigation_opened_after_the_peak_sees_it_from_the_light_polls(team):
    """Walkthrough 1 over real HTTP: nobody has opened anything while the storm builds, so
    only the light cadence polls (store-only). Opened two minutes after, the KV check's
    five-minute window already holds the storm."""
    server = SimServer(
        SimDeployment("kv-pressure", seed=0, clock=SimClock("manual"))
    ).start_in_thread()
    base = f"http://127.0.0.1:{server.ports['main']}"
    deployment = Deployment.objects.create(team=team, name="atlas-sim")
    Target.objects.create(deployment=deployment, kind=TargetKind.ENGINE, url=base + "/metrics")
    start = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
    cycle = start
    try:
        while cycle < start + timedelta(seconds=360):  # the ramp, the storm, two minutes more
            _advance(base, LIGHT_S)
            cycle += timedelta(seconds=LIGHT_S)
            poll_light.apply(args=[str(deployment.pk), cycle.isoformat()])
    finally:
        server.stop()
    assert Investigation.objects.count() == 0 and Poll.objects.count() == 12
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=None
    )
    state = live.current_state(investigation, now=cycle, gate=False)
    kv = next(c for c in state.result.find("kv-cache-pressure").checks if c.id == "kv-usage")
    assert kv.samples == 10 and kv.span_s == 270  # the window's light polls, 30 s apart
    assert kv.measured is not None and kv.measured >= 0.9, kv  # the storm, before the open
    assert kv.outcome == "confirm" and state.result.alarm.firing
    assert state.result.ranking[0] == "kv-cache-pressure"


def _advance(base: str, seconds: int) -> None:
    request = urllib.request.Request(  # noqa: S310 - loopback
        f"{base}/control/advance?seconds={seconds}", data=b"", method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        response.read()
