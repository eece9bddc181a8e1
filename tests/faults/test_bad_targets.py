"""A target that hangs, one that answers slowly and one that answers 50 MB, next to a good
one on the same deployment: the good target is still stored every cycle.

Real worker and beat on a private Redis, the hostile server's real sockets. The claim is
counted in cycles (the poll grid), never as a measured duration.
"""

from __future__ import annotations

from deployments.models import Deployment
from investigations import actions
from probes.cycles import cycle_start
from probes.models import Observation, Poll, Target, TargetKind
from tests.support.hostile import hostile_server
from tests.support.services import (
    celery_beat_args,
    celery_worker_args,
    product_env,
    product_process,
    tail,
    wait_until,
)
from tests.support.workers import database_url

INTERVAL_S = 5  # the product's default poll interval
CYCLES = 6  # consecutive cycles the good target must fill
LOGS = ("worker", "beat")


def test_hung_slow_and_huge_targets_do_not_cost_the_good_one_a_cycle(
    transactional_db, team, commander, private_redis, tmp_path
):
    deployment = Deployment.objects.create(
        team=team, name="atlas-bad-targets", poll_interval_s=INTERVAL_S
    )
    actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)
    # The default probe timeout (8 s) is longer than the poll interval on purpose.
    environment = product_env(
        database_url=database_url(), broker_url=private_redis.url, data_dir=tmp_path
    )
    with hostile_server() as base:
        good = Target.objects.create(
            deployment=deployment, kind=TargetKind.ENGINE, url=base + "/metrics", replica="good"
        )
        bad = {
            path: Target.objects.create(
                deployment=deployment, kind=TargetKind.ENGINE, url=base + "/" + path, replica=path
            )
            for path in ("hang", "slow", "huge")
        }
        with (
            product_process("worker", celery_worker_args(), environment, tmp_path),
            product_process("beat", celery_beat_args(tmp_path), environment, tmp_path),
        ):
            # Wait for the first stored cycle, then for CYCLES more cycles of the grid to
            # have ended (plus one for the last one's poll to finish).
            assert wait_until(lambda: Poll.objects.filter(target=good).exists(), 60), tail(
                tmp_path, *LOGS
            )
            first = Poll.objects.filter(target=good).order_by("cycle_at").first().cycle_at
            wanted = [first.timestamp() + INTERVAL_S * n for n in range(1, CYCLES + 1)]
            last = wanted[-1]
            done = wait_until(
                lambda: Poll.objects.filter(
                    target__deployment=deployment, cycle_at__gt=_at(last)
                ).exists(),
                INTERVAL_S * (CYCLES + 6),
            )
            assert done, tail(tmp_path, *LOGS)
    stored = {
        p.timestamp()
        for p in Poll.objects.filter(target=good, ok=True).values_list("cycle_at", flat=True)
    }
    missing = [w for w in wanted if w not in stored]
    assert not missing, (missing, sorted(stored), tail(tmp_path, *LOGS))
    window = Observation.objects.filter(target=good, taken_at__gt=first, taken_at__lte=_at(last))
    assert window.count() == 2 * CYCLES
    kinds = dict(
        Poll.objects.filter(target__in=bad.values(), cycle_at__gt=first)
        .values_list("target__replica", "error_kind")
        .distinct()
    )
    assert kinds == {"hang": "timeout", "slow": "timeout", "huge": "too-large"}, kinds
    assert cycle_start(first, INTERVAL_S) == first


def _at(timestamp: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, tz=UTC)


def test_a_cycles_fetch_budget_ends_before_the_next_cycle_and_never_below_the_floor():
    from datetime import timedelta

    from probes.policy import MIN_FETCH_S, STORE_MARGIN_S, cycle_time_left, fetch_policy

    cycle = _at(1_800_000_000)
    assert cycle_time_left(cycle, 5, cycle) == 5 - STORE_MARGIN_S
    assert cycle_time_left(cycle, 5, cycle + timedelta(seconds=3)) == 2 - STORE_MARGIN_S
    assert cycle_time_left(cycle, 5, cycle + timedelta(seconds=4.5)) == MIN_FETCH_S
    # A cycle already over (a replay or backfill) races no later cycle: configured timeout.
    assert cycle_time_left(cycle, 5, cycle + timedelta(seconds=60)) is None
    assert fetch_policy(budget_s=None).total_timeout == fetch_policy().total_timeout
    assert fetch_policy(budget_s=2.5).total_timeout == 2.5
    assert fetch_policy(budget_s=0.1).total_timeout == MIN_FETCH_S
    assert fetch_policy(budget_s=3600).total_timeout == fetch_policy().total_timeout
