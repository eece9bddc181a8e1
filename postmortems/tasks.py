"""Rendering a postmortem export (Markdown or PDF) in a worker.

The Export row is the job's truth. The task claims it with a conditional UPDATE
(queued -> rendering), renders from the record, stores the file and finishes the row
(done, or failed with a reason) with another conditional UPDATE on the attempt it
claimed. A redelivered message finds the row done (or being rendered) and does nothing;
a row whose worker died mid-render is retaken once it is older than the hard time limit.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.files.base import ContentFile
from django.db import InterfaceError, OperationalError
from django.db.models import F, Q
from django.utils import timezone

from postmortems.models import Export

log = logging.getLogger(__name__)


def _stale_before():
    # A render older than the hard limit has lost its worker (acks_late redelivers it).
    return timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 30)


@shared_task(
    name="postmortems.export",
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    max_retries=3,
)
def export_postmortem(export_id: str) -> str:
    """Render one export. Idempotent: only a queued (or abandoned) row is rendered."""
    claimed = Export.objects.filter(
        Q(status=Export.Status.QUEUED)
        | Q(status=Export.Status.RENDERING, started_at__lt=_stale_before()),
        pk=export_id,
    ).update(status=Export.Status.RENDERING, started_at=timezone.now(), attempts=F("attempts") + 1)
    if not claimed:
        return "skipped"
    export = Export.objects.select_related(
        "postmortem__investigation__deployment", "postmortem__investigation__team"
    ).get(pk=export_id)
    mine = Export.objects.filter(
        pk=export.pk, status=Export.Status.RENDERING, attempts=export.attempts
    )
    try:
        content = render_export(export)
    except SoftTimeLimitExceeded:
        return _fail(mine, "rendering exceeded the worker's time limit")
    except (OperationalError, InterfaceError):
        # The database, not the document: give the row back and let Celery retry.
        mine.update(status=Export.Status.QUEUED, started_at=None)
        raise
    except Exception as exc:
        log.exception("postmortem.export.failed", extra={"export": export_id})
        return _fail(mine, f"rendering failed ({type(exc).__name__})")
    export.file.save(f"{export.pk}.{export.extension}", ContentFile(content), save=False)
    finished = mine.update(
        status=Export.Status.DONE, file=export.file.name, reason="", finished_at=timezone.now()
    )
    if not finished:
        # Another attempt took the row over meanwhile; its file is the one kept.
        export.file.storage.delete(export.file.name)
        return "superseded"
    log.info("postmortem.export.done", extra={"export": export_id, "bytes": len(content)})
    return Export.Status.DONE


def render_export(export: Export) -> bytes:
    from django.urls import reverse

    from postmortems.markdown import render_markdown
    from postmortems.record import load_document

    investigation = export.postmortem.investigation
    path = reverse("investigations:detail", args=[investigation.pk])
    doc = load_document(
        investigation,
        investigation_url=(export.base_url.rstrip("/") + path) if export.base_url else path,
        version_number=export.version_number,
    )
    if export.format == Export.Format.MARKDOWN:
        return render_markdown(doc).encode("utf-8")
    from postmortems.pdf import render_pdf  # WeasyPrint loads only in the worker

    return render_pdf(doc)


def _fail(mine, reason: str) -> str:
    mine.update(status=Export.Status.FAILED, reason=reason[:2000], finished_at=timezone.now())
    return Export.Status.FAILED
