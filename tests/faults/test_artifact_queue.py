"""Artifact analysis cannot starve polling (issue 19, finding 3).

Real polling worker, artifact worker and beat on a private Redis, started with the
arguments deploy/Procfile gives them. Two hostile traces (gzip members repeated into ~4e7
events; 40 MB on disk) each keep their analysis busy until the analysis deadline rejects
them. On the single shared queue those two analyses held both worker processes and no poll
and no heartbeat ran meanwhile; routed to the ``artifacts`` queue they run one after the
other on the artifact worker while the engine target goes on being polled.

Nothing here times the product: the window is what the analyses themselves recorded
(started = analysed_at - analysis_seconds), and the claim is what happened inside it.
"""

from __future__ import annotations

import zlib
from datetime import timedelta

from kombu import Connection

from artifacts import actions as artifact_actions
from artifacts.models import Artifact, Source, Status
from artifacts.tasks import analyse_artifact
from deployments.models import Deployment
from investigations import actions
from probes.models import Poll, Target, TargetKind, WorkerHeartbeat
from tests.support.hostile import hostile_server
from tests.support.services import (
    celery_artifact_worker_args,
    celery_beat_args,
    celery_worker_args,
    product_env,
    product_process,
    tail,
    wait_until,
)
from tests.support.workers import database_url

LOGS = ("worker", "artifact-worker", "beat")
TIME_LIMIT_S = 12  # the artifact deadline for this run (600 s by default)
EVENT = b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":1},'


def _gzip_member(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip member
    return compressor.compress(data) + compressor.flush()


def _endless_trace(blocks: int = 4000) -> list[bytes]:
    """A valid trace of ``blocks`` x 10,000 events as concatenated gzip members (legal
    gzip), built from one compressed block: ~10 KB per 900 KB of events."""
    block = _gzip_member(EVENT * 10_000)
    return [
        _gzip_member(b'{"traceEvents":['),
        *([block] * blocks),
        _gzip_member(EVENT[:-1] + b"]}"),
    ]


def _started(artifact: Artifact):
    return artifact.analysed_at - timedelta(seconds=artifact.analysis_seconds)


def test_polls_and_heartbeats_go_on_while_analyses_hold_the_artifact_worker(
    transactional_db, team, commander, private_redis, tmp_path, settings
):
    settings.MEDIA_ROOT = tmp_path / "media"  # the workers' ATLAS_DATA_DIR is tmp_path
    deployment = Deployment.objects.create(team=team, name="atlas-queue", poll_interval_s=2)
    environment = product_env(
        database_url=database_url(),
        broker_url=private_redis.url,
        data_dir=tmp_path,
        extra={"ATLAS_HEARTBEAT_SECONDS": "2", "ATLAS_ARTIFACT_TIME_LIMIT": str(TIME_LIMIT_S)},
    )
    with hostile_server() as base:
        engine = Target.objects.create(
            deployment=deployment, kind=TargetKind.ENGINE, url=base + "/metrics"
        )
        investigation = actions.open_investigation(
            deployment=deployment, symptom="high-ttft", user=commander
        )
        held = [
            artifact_actions.store(
                deployment=deployment,
                investigation=investigation,
                # Two different files: the same bytes twice would be analysed once (dedup).
                chunks=_endless_trace(blocks=4000 + i),
                name=f"endless-{i}.json.gz",
                source=Source.UPLOAD,
            )
            for i in (1, 2)
        ]
        with (
            product_process("worker", celery_worker_args(), environment, tmp_path),
            product_process(
                "artifact-worker", celery_artifact_worker_args(), environment, tmp_path
            ),
            product_process("beat", celery_beat_args(tmp_path), environment, tmp_path),
        ):
            assert wait_until(lambda: Poll.objects.filter(target=engine).exists(), 60), tail(
                tmp_path, *LOGS
            )
            # Published as the upload publishes them: no queue named, the routes decide.
            with Connection(private_redis.url) as conn:
                for artifact in held:
                    analyse_artifact.apply_async(args=[str(artifact.pk)], connection=conn)
            assert wait_until(
                lambda: Artifact.objects.filter(status=Status.REJECTED).count() == 2,
                6 * TIME_LIMIT_S + 60,
            ), tail(tmp_path, *LOGS)
    first, second = sorted(Artifact.objects.all(), key=_started)
    for artifact in (first, second):
        assert "time limit" in artifact.reason, artifact.reason  # busy to the end, as meant
    # One at a time: the second analysis began only once the first had finished.
    assert _started(second) >= first.analysed_at - timedelta(seconds=1)
    window = {"gt": _started(first), "lt": second.analysed_at}
    polls = Poll.objects.filter(
        target=engine, cycle_at__gt=window["gt"], cycle_at__lt=window["lt"]
    ).count()
    beats = WorkerHeartbeat.objects.filter(
        recorded_at__gt=window["gt"], recorded_at__lt=window["lt"]
    ).count()
    # ~2 x TIME_LIMIT_S of analysis on a 2 s grid: ~12 cycles and beats; on the shared
    # queue both were 0. Half the grid leaves room for a loaded machine.
    assert polls >= TIME_LIMIT_S // 2, (polls, tail(tmp_path, *LOGS))
    assert beats >= TIME_LIMIT_S // 2, (beats, tail(tmp_path, *LOGS))
    assert "artifacts.analyse[" in (tmp_path / "artifact-worker.log").read_text()
    assert "artifacts.analyse[" not in (tmp_path / "worker.log").read_text()
