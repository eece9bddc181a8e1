"""The page's observation read: times computed by the database are exactly Python's, and a
read reused between requests returns what a fresh read would, and never hides a stored
cycle or a decision."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from investigations import actions
from investigations.observations import REUSE_S, load_observations
from probes.models import Observation, Target, TargetKind
from probes.store import PollOutcome, record_cycle
from tests.support import builders

SIGNALS = {"kv_cache_usage": 300, "ttft_p95": 60}


def _deployment(team):
    deployment = builders.deployment(team)
    engine = builders.target(deployment)
    dcgm = builders.target(deployment, TargetKind.DCGM, "http://10.0.0.5:9400/metrics")
    return deployment, engine, dcgm


def test_database_epoch_seconds_are_exactly_python_timestamps(team):
    deployment, engine, dcgm = _deployment(team)
    now = timezone.now().replace(microsecond=654321)
    times = [
        now - timedelta(seconds=s, microseconds=us) for s, us in ((0, 0), (7, 1), (59, 999999))
    ]
    times.append(now.replace(microsecond=0) - timedelta(seconds=3))  # stored without a fraction
    Observation.objects.bulk_create(
        [Observation(target=engine, taken_at=t, signal="ttft_p95", value=1.0) for t in times]
        + [Observation(target=dcgm, taken_at=now, signal="ttft_p95", labels="gpu=0", value=2.0)]
    )
    view = load_observations(deployment.id, SIGNALS, now)
    ((labels, points),) = view[("engine", "ttft_p95")]
    assert labels == f"target={str(engine.pk)[:8]}"
    assert [t for t, _ in points] == sorted(t.timestamp() for t in times)
    assert view[("dcgm", "ttft_p95")] == [
        (f"target={str(dcgm.pk)[:8]},gpu=0", [(now.timestamp(), 2.0)])
    ]


def _series(deployment, engine, dcgm, now):
    """Every 5 s for 10 minutes, so points age out of the 60 s and 300 s windows as the
    clock moves; per-rank engine series are stored too (and left out)."""
    rows = []
    for i in range(120):
        at = now - timedelta(seconds=5 * i)
        rows.append(Observation(target=engine, taken_at=at, signal="kv_cache_usage", value=i))
        rows.append(Observation(target=engine, taken_at=at, signal="ttft_p95", value=i / 10))
        rows.append(
            Observation(target=engine, taken_at=at, signal="ttft_p95", labels="rank=0", value=9)
        )
        rows.append(
            Observation(target=dcgm, taken_at=at, signal="kv_cache_usage", labels="gpu=1", value=i)
        )
    Observation.objects.bulk_create(rows)


def test_a_reused_read_is_what_a_fresh_read_would_be(team, django_assert_num_queries):
    deployment, engine, dcgm = _deployment(team)
    now = timezone.now()
    _series(deployment, engine, dcgm, now)
    with django_assert_num_queries(2):  # targets (with the version), observations
        first = load_observations(deployment.id, SIGNALS, now, reuse=True)
    assert first == load_observations(deployment.id, SIGNALS, now)
    for seconds in (2.5, 5, REUSE_S):
        later = now + timedelta(seconds=seconds)
        with django_assert_num_queries(1):  # the targets and the version only
            reused = load_observations(deployment.id, SIGNALS, later, reuse=True)
        fresh = load_observations(deployment.id, SIGNALS, later)
        assert reused == fresh and list(reused) == list(fresh)
    # Points did age out: the reused read was cut to each window at the later time.
    oldest = min(t for _, points in reused[("engine", "ttft_p95")] for t, _ in points)
    assert oldest > (now - timedelta(seconds=60)).timestamp() + 5
    # Past the margin, and for a longer window than was read, it is read again.
    with django_assert_num_queries(2):
        load_observations(deployment.id, SIGNALS, now + timedelta(seconds=REUSE_S + 1), reuse=True)
    with django_assert_num_queries(2):
        wider = load_observations(deployment.id, {"ttft_p95": 600}, now, reuse=True)
    assert wider == load_observations(deployment.id, {"ttft_p95": 600}, now)


def test_a_stored_cycle_or_row_is_never_hidden_by_a_reused_read(team):
    deployment, engine, dcgm = _deployment(team)
    now = timezone.now()
    _series(deployment, engine, dcgm, now)
    load_observations(deployment.id, SIGNALS, now, reuse=True)
    cycle = now + timedelta(seconds=1)
    # The real poll path: observations and the target's last poll in one transaction.
    record_cycle(
        cycle, [PollOutcome(target_id=engine.pk, ok=True, observations=[("ttft_p95", "", 42.0)])]
    )
    later = now + timedelta(seconds=2)
    view = load_observations(deployment.id, SIGNALS, later, reuse=True)
    assert view == load_observations(deployment.id, SIGNALS, later)
    assert view[("engine", "ttft_p95")][0][1][-1] == (cycle.timestamp(), 42.0)
    # A row written some other way (no poll bookkeeping) is seen as well.
    Observation.objects.create(
        target=dcgm, taken_at=later, signal="kv_cache_usage", labels="gpu=1", value=-1
    )
    again = load_observations(deployment.id, SIGNALS, later, reuse=True)
    assert again[("dcgm", "kv_cache_usage")][0][1][-1] == (later.timestamp(), -1.0)
    # A target added since is a different read, too.
    other = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://10.0.0.6/metrics"
    )
    Observation.objects.create(target=other, taken_at=now, signal="ttft_p95", value=7)
    labels = [
        name
        for name, _ in load_observations(deployment.id, SIGNALS, later, reuse=True)[
            ("engine", "ttft_p95")
        ]
    ]
    assert f"target={str(other.pk)[:8]}" in labels


def test_the_tree_shows_a_decision_at_once(team, commander, client_for):
    deployment, engine, dcgm = _deployment(team)
    _series(deployment, engine, dcgm, timezone.now())
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )
    client = client_for(commander)
    url = reverse("investigations:tree", args=[investigation.pk])
    before = client.get(url).content.decode()
    node = 'data-testid="node-router-latency"'
    assert node in before and "Reopen" not in before.split(node)[1].split("</details>")[0]
    actions.decide(
        investigation=investigation, node="router-latency", action="eliminate",
        reason="router p95 flat", user=commander, evidence={},
    )  # fmt: skip
    after = client.get(url).content.decode()  # the observation read is reused; not this
    section = after.split(node)[1]
    assert 'value="reopen"' in section.split("</form>")[0]
