"""A worker process killed with SIGKILL in the middle of a poll: the broker redelivers the
task, the redelivered task retakes its claim, and every poll and observation is stored
exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import UTC, datetime

import pytest
from kombu import Connection

from investigations.models import Investigation
from probes.models import Observation, Poll, Target, TargetKind
from probes.tasks import poll_deployment
from tests.support import builders
from tests.support.hostile import hostile_server
from tests.support.workers import broker_for, celery_worker, wait_for

CYCLE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def _pool_children(pid: int) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    return [int(x) for x in out.split()]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_poll_killed_mid_flight_is_redelivered_and_stored_once(team, tmp_path):
    url, options, worker_env = broker_for("redis", tmp_path)
    deployment = builders.deployment(team, "atlas-killed")
    Investigation.objects.create(team=team, deployment=deployment, symptom="high-ttft")
    with hostile_server() as base:
        fast = Target.objects.create(
            deployment=deployment, kind=TargetKind.ENGINE, url=base + "/metrics"
        )
        slow = Target.objects.create(
            deployment=deployment, kind=TargetKind.ENGINE, url=base + "/slow"
        )
        with celery_worker(worker_env, tmp_path, extra_env={"ATLAS_PROBE_TIMEOUT": "4"}) as (
            queue,
            process,
        ):
            with Connection(url, transport_options=options) as conn:
                poll_deployment.apply_async(
                    args=[str(deployment.pk), CYCLE.isoformat()], queue=queue, connection=conn
                )
            # The task has claimed its targets and is waiting on the slow one: kill the
            # process that runs it, as the OOM killer would.
            assert wait_for(
                lambda: Target.objects.filter(pk=slow.pk).exclude(claim_task="").exists(), 60
            ), (tmp_path / "worker.log").read_text()[-3000:]
            children = _pool_children(process.pid)
            assert children, "the prefork pool has no child process"
            for child in children:
                os.kill(child, signal.SIGKILL)
            stored = wait_for(lambda: Poll.objects.filter(cycle_at=CYCLE).count() == 2, 90)
            log = (tmp_path / "worker.log").read_text()
    assert stored, log[-4000:]
    assert "WorkerLostError" in log or "SIGKILL" in log or "signal 9" in log
    assert Poll.objects.get(target=fast, cycle_at=CYCLE).ok
    slow_poll = Poll.objects.get(target=slow, cycle_at=CYCLE)
    assert not slow_poll.ok and slow_poll.error_kind == "timeout"
    values = list(Observation.objects.filter(target=fast).values_list("signal", "value"))
    assert sorted(values) == [("kv_cache_usage", 0.94), ("requests_waiting", 47.0)]
    assert not Target.objects.exclude(claim_task="").exists()
