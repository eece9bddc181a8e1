"""A pool child SIGKILLed mid-poll on the embedded broker, its redelivery already past
``expires`` (issue 19.6).

The broker redelivers the message; the worker discards it as expired. The dead task's claim
used to hold the deployment's targets for the whole lease (the task time limit, 90 s), so
every later cycle found them claimed and stored nothing (17 cycles lost on the demo's 5 s
grid). Now the discarded message frees its claims, and the next cycle's poll stores.

Real processes: a Celery worker on the embedded filesystem broker, a target that dribbles
its body so the poll is mid-flight when the child dies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
from kombu import Connection

from investigations.models import Investigation
from probes.models import Poll, Target, TargetKind
from probes.tasks import poll_deployment
from tests.support import builders
from tests.support.hostile import hostile_server
from tests.support.workers import broker_for, celery_worker, wait_for

CYCLE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
EXPIRES_S = 3  # the live grid uses 2 x the interval; short here so the kill lands after it
RELEASE_WAIT_S = 30  # well inside the 90 s lease the dead claim used to keep


def _pool_children(pid: int) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    return [int(x) for x in out.split()]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_expired_redelivery_frees_the_dead_claim_for_the_next_cycle(team, tmp_path):
    url, options, worker_env = broker_for("embedded", tmp_path)
    deployment = builders.deployment(team, "atlas-killed-expired")
    Investigation.objects.create(team=team, deployment=deployment, symptom="high-ttft")
    with hostile_server() as base:
        Target.objects.create(deployment=deployment, kind=TargetKind.ENGINE, url=base + "/metrics")
        slow = Target.objects.create(
            deployment=deployment, kind=TargetKind.ENGINE, url=base + "/slow"
        )
        extra = {"ATLAS_PROBE_TIMEOUT": "30", "ATLAS_TASK_TIME_LIMIT": "90"}
        with celery_worker(worker_env, tmp_path, extra_env=extra) as (queue, process):
            # ``expires`` counts from publishing: publish once the worker consumes.
            ready = wait_for(lambda: " ready." in (tmp_path / "worker.log").read_text(), 120)
            assert ready, (tmp_path / "worker.log").read_text()[-3000:]
            with Connection(url, transport_options=options) as conn:
                sent = time.monotonic()
                poll_deployment.apply_async(
                    args=[str(deployment.pk), CYCLE.isoformat()],
                    queue=queue,
                    connection=conn,
                    expires=EXPIRES_S,
                )
            log_path = tmp_path / "worker.log"
            assert wait_for(
                lambda: Target.objects.filter(pk=slow.pk).exclude(claim_task="").exists(), 60
            ), log_path.read_text()[-3000:]
            # Still mid-poll (the slow target dribbles for 30 s), now past ``expires``:
            # kill the child that runs it, as the OOM killer would.
            time.sleep(max(0.0, sent + EXPIRES_S + 1 - time.monotonic()))
            children = _pool_children(process.pid)
            assert children, "the prefork pool has no child process"
            for child in children:
                os.kill(child, signal.SIGKILL)
            discarded = wait_for(lambda: "Discarding revoked task" in log_path.read_text(), 60)
            released = wait_for(
                lambda: not Target.objects.exclude(claim_task="").exists(), RELEASE_WAIT_S
            )
            claims = list(Target.objects.values_list("claim_task", "claimed_until"))
            # The next cycle's poll, a new task: it finds the targets free and stores both.
            following = CYCLE + timedelta(seconds=5)
            with Connection(url, transport_options=options) as conn:
                poll_deployment.apply_async(
                    args=[str(deployment.pk), following.isoformat()], queue=queue, connection=conn
                )
            # The slow target takes its 30 s deadline again: a bounded wait well above it.
            stored = wait_for(lambda: Poll.objects.filter(cycle_at=following).count() == 2, 120)
            log = log_path.read_text()
    assert discarded, f"the redelivery was not discarded as expired\n{log[-4000:]}"
    assert released, f"the dead task's claim was kept: {claims}\n{log[-4000:]}"
    assert stored, f"the next cycle stored {Poll.objects.filter(cycle_at=following).count()}/2"
    assert not Target.objects.exclude(claim_task="").exists()
