"""The beat schedule as deployed drives both cadences. Real worker and beat on a private
Redis, the hostile server's real /metrics: with no investigation open the deployment is
polled on the light grid and nothing is evaluated; once one opens, its own grid, evaluated.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

from deployments.models import Deployment
from investigations import actions
from investigations.models import Investigation
from probes.models import Poll, Target, TargetKind
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

LIGHT_S = 6  # ATLAS_LIGHT_POLL_SECONDS for the run (30 by default)
INTERVAL_S = 2  # beat dispatches every 2 s
LOGS = ("worker", "beat")


def test_idle_deployments_are_polled_lightly_and_open_ones_at_their_cadence(
    transactional_db, team, commander, private_redis, tmp_path
):
    deployment = Deployment.objects.create(
        team=team, name="atlas-light", poll_interval_s=INTERVAL_S
    )
    environment = product_env(
        database_url=database_url(),
        broker_url=private_redis.url,
        data_dir=tmp_path,
        extra={"ATLAS_LIGHT_POLL_SECONDS": str(LIGHT_S)},
    )
    with hostile_server() as base:
        engine = Target.objects.create(
            deployment=deployment, kind=TargetKind.ENGINE, url=base + "/metrics"
        )
        with (
            product_process("worker", celery_worker_args(), environment, tmp_path),
            product_process("beat", celery_beat_args(tmp_path), environment, tmp_path),
        ):
            assert wait_until(lambda: Poll.objects.filter(target=engine).count() >= 3, 60), tail(
                tmp_path, *LOGS
            )
            light = sorted(Poll.objects.filter(target=engine).values_list("cycle_at", flat=True))
            investigation = actions.open_investigation(
                deployment=deployment, symptom="high-ttft", user=commander
            )
            opened = investigation.opened_at
            assert wait_until(
                lambda: (
                    Poll.objects.filter(target=engine, cycle_at__gt=opened).count() >= 5
                    and Investigation.objects.get(pk=investigation.pk).last_evaluated_at is not None
                ),
                60,
            ), tail(tmp_path, *LOGS)
    assert all(at.timestamp() % LIGHT_S == 0 for at in light), light
    gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(light)}
    assert gaps <= {float(LIGHT_S), 2.0 * LIGHT_S}, light  # the light grid (a missed beat: 2x)
    after = sorted(
        Poll.objects.filter(target=engine, cycle_at__gt=opened).values_list("cycle_at", flat=True)
    )
    fast = [b - a for a, b in itertools.pairwise(after)]
    assert fast.count(timedelta(seconds=INTERVAL_S)) >= 3, after  # its own 2 s grid
    evaluated = Investigation.objects.get(pk=investigation.pk).last_evaluated_at
    assert evaluated > opened and evaluated in after
