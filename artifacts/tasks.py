"""Artifact tasks: analyse a stored file once; collect files from profiler endpoints.

Thin: claims and writes here, parsing and arithmetic in ``artifacts.analysis``. A
redelivered analysis retakes an ``analysing`` row (the worker that had it died); a
finished one is never redone. A duplicate (the team's bytes already) takes its first
copy's result instead of running again (``artifacts.dedup``).
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

from artifacts import actions, collect, dedup, evidence, timeline
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
    shared = _from_first_copy(artifact_id)
    if shared is not None:
        return shared
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
        _share(artifact.pk)
    _note(artifact, _summary(analysis))
    return Status.DONE


def _from_first_copy(artifact_id: str) -> str | None:
    """For a queued duplicate: the status it took from its first copy, ``"waiting"`` while
    that copy is still being analysed (its end shares with this row), or ``None`` when
    this row is analysed itself (not a duplicate, or the result would not be the same)."""
    with transaction.atomic():
        duplicate = Artifact.objects.filter(
            pk=artifact_id, status=Status.QUEUED, duplicate_of__isnull=False
        ).first()
        if duplicate is None:
            return None
        # FOR UPDATE: wait for an analysis of the first copy that is just committing.
        first = Artifact.objects.select_for_update().filter(pk=duplicate.duplicate_of_id).first()
        if first is None:  # deleted meanwhile: this row is its own first copy now
            return None
        if first.status in dedup.PENDING:
            return "waiting"
        if not dedup.reusable(first, duplicate):
            return None
        return dedup.take_analysis(first, duplicate) or "skipped"


def _share(first_id) -> None:
    """Settle the first copy's queued duplicates, in the transaction that finished it (its
    row is locked by that update): each takes the result, or, where it would differ (a
    gc log of another deployment, another declared kind), is queued to be analysed."""
    first = Artifact.objects.get(pk=first_id)
    for duplicate in Artifact.objects.filter(duplicate_of_id=first_id, status=Status.QUEUED):
        if dedup.reusable(first, duplicate):
            dedup.take_analysis(first, duplicate)
        else:
            pk = str(duplicate.pk)
            transaction.on_commit(lambda pk=pk: analyse_artifact.delay(pk))


def release_duplicates(first: Artifact) -> None:
    """Before a first copy is deleted (``pre_delete``): its duplicates that still wait for
    its result become first copies themselves (the link is set null) and are queued, once
    the delete commits, to be analysed on the file they share."""
    waiting = Artifact.objects.filter(duplicate_of=first, status=Status.QUEUED)
    for pk in waiting.values_list("pk", flat=True):
        transaction.on_commit(lambda pk=str(pk): analyse_artifact.delay(pk))


def _reject(artifact: Artifact, reason: str, started: float) -> str:
    with transaction.atomic():
        Artifact.objects.filter(pk=artifact.pk).update(
            status=Status.REJECTED,
            reason=reason[:2000],
            analysed_at=timezone.now(),
            analysis_seconds=time.monotonic() - started,
        )
        _share(artifact.pk)
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
