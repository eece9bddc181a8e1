"""Artifact tasks: analyse a stored file once; collect files from profiler endpoints.

Thin: claims and writes here, parsing and arithmetic in ``artifacts.analysis``. A
redelivered analysis retakes an ``analysing`` row (the worker that had it died); a
finished one is never redone.
"""

from __future__ import annotations

import logging
import time

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from artifacts import actions, collect, evidence, timeline
from artifacts.analysis import analyse_file
from artifacts.correlation import latency_source
from artifacts.errors import ArtifactRejected
from artifacts.models import Artifact, Status
from artifacts.policy import artifact_limits

log = logging.getLogger(__name__)


@shared_task(
    name="artifacts.analyse",
    bind=True,
    soft_time_limit=settings.ATLAS_ARTIFACT_TIME_LIMIT + 15,
    time_limit=settings.ATLAS_ARTIFACT_TIME_LIMIT + 45,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    max_retries=5,
)
def analyse_artifact(self, artifact_id: str) -> str:
    claimed = Artifact.objects.filter(
        Q(status=Status.QUEUED) | Q(status=Status.ANALYSING), pk=artifact_id
    ).update(status=Status.ANALYSING)
    if not claimed:
        return "skipped"
    artifact = Artifact.objects.get(pk=artifact_id)
    started = time.monotonic()
    try:
        analysis = analyse_file(
            artifact.file.path,
            artifact.kind or None,
            artifact_limits(),
            latencies=latency_source(artifact.deployment_id),
        )
    except ArtifactRejected as exc:
        return _reject(artifact, exc.reason, started)
    except SoftTimeLimitExceeded:
        return _reject(artifact, "analysis exceeded the worker's time limit", started)
    except (OperationalError, InterfaceError):
        raise  # the database, not the file: retried
    except Exception as exc:
        # A file that breaks an analyser is still the file's story to tell, not a stuck row.
        log.exception("artifact.analysis.crashed", extra={"artifact": artifact_id})
        return _reject(
            artifact, f"the analyser failed on this file ({type(exc).__name__})", started
        )
    # The row and its signals' observations commit together: a done artifact is evidence.
    with transaction.atomic():
        Artifact.objects.filter(pk=artifact.pk).update(
            status=Status.DONE,
            kind=analysis["kind"],
            analysis=analysis,
            signals=analysis["signals"],
            reason="",
            analysed_at=timezone.now(),
            analysis_seconds=time.monotonic() - started,
        )
        evidence.record_signals(
            artifact.pk, artifact.deployment_id, artifact.captured_at, analysis["signals"]
        )
    _note(artifact, _summary(analysis))
    return Status.DONE


def _reject(artifact: Artifact, reason: str, started: float) -> str:
    Artifact.objects.filter(pk=artifact.pk).update(
        status=Status.REJECTED,
        reason=reason[:2000],
        analysed_at=timezone.now(),
        analysis_seconds=time.monotonic() - started,
    )
    log.info("artifact.rejected", extra={"artifact": str(artifact.pk), "reason": reason})
    _note(artifact, f"Artifact {artifact.name} rejected: {reason}")
    return Status.REJECTED


def _summary(analysis: dict) -> str:
    findings = analysis.get("findings") or []
    if not findings:
        return f"{analysis['kind']} analysed: no findings"
    titles = "; ".join(str(f.get("title", f.get("key", ""))) for f in findings[:3])
    return f"{analysis['kind']} analysed: {titles}"


def _note(artifact: Artifact, summary: str) -> None:
    if artifact.investigation_id is None:
        return
    timeline.note(artifact.investigation_id, f"{artifact.name}: {summary}", artifact=artifact)


@shared_task(
    name="artifacts.collect",
    soft_time_limit=settings.ATLAS_ARTIFACT_FETCH_TIMEOUT * 2 + 15,
    time_limit=settings.ATLAS_ARTIFACT_FETCH_TIMEOUT * 2 + 45,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    max_retries=3,
)
def collect_artifacts(investigation_id: str, user_id: int | None = None) -> int:
    """Fetch every enabled profiler target of the investigation's deployment once, through
    the same guarded client as the probes, and store what came back as artifacts."""
    return collect.collect_for(investigation_id, user_id, store=store_and_analyse)


def store_and_analyse(**kwargs) -> Artifact:
    """``actions.store``, then the analysis queued once the row is committed."""
    artifact = actions.store(**kwargs)
    transaction.on_commit(lambda: analyse_artifact.delay(str(artifact.pk)))
    return artifact
