"""Storing an artifact: stream it to disk under a size bound, hash it, note it.

Used by the browser upload, the API and the probe collector alike, always through
``artifacts.tasks.store_and_analyse``, which queues the analysis (tasks import actions,
never the reverse). The bound is enforced while copying, so a client that lies about its
size costs at most the limit. Bytes the team already holds (same sha256) are not written
again: the row names the first copy and shares its file (``artifacts.dedup``).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.files import File
from django.db import transaction
from django.utils import timezone

from artifacts import dedup, kinds, timeline
from artifacts.models import Artifact, Source
from deployments.models import Deployment
from investigations.models import Investigation

MAX_NAME = 200


class UploadRejected(ValueError):
    """The upload itself is unacceptable (too large, empty, unknown kind)."""


class ClosedInvestigation(UploadRejected):
    """An artifact for a closed investigation: its record is frozen at the close."""

    @classmethod
    def for_closed(cls) -> ClosedInvestigation:
        return cls("this investigation is closed: its record is frozen and takes no new artifacts")


class QuotaExceeded(UploadRejected):
    """The team's stored artifacts would pass ATLAS_ARTIFACT_TEAM_QUOTA_BYTES."""


def check_quota(team_id: int, size: int) -> None:
    """Refuse ``size`` more bytes for the team past its quota (0: none). Counted from the
    rows, each distinct content once, so a deleted artifact frees its share; ``store``
    asks only for bytes the team does not hold yet (a duplicate costs nothing more)."""
    quota = settings.ATLAS_ARTIFACT_TEAM_QUOTA_BYTES
    if not quota:
        return
    used = dedup.used_bytes(team_id)
    if used + size > quota:
        raise QuotaExceeded(
            f"the team's artifact storage quota is full ({used >> 20:,} of "
            f"{quota >> 20:,} MiB used; this file needs {max(1, size >> 20):,} MiB): "
            "delete old artifacts or ask an administrator to raise ATLAS_ARTIFACT_TEAM_QUOTA_BYTES"
        )


def clean_name(name: str) -> str:
    """A display name: the last path component, printable, bounded."""
    base = Path(str(name).replace("\\", "/")).name or "artifact"
    printable = "".join(ch if ch.isprintable() else "_" for ch in base)
    return printable[:MAX_NAME]


def store(
    *,
    deployment: Deployment,
    chunks: Iterable[bytes],
    name: str,
    source: str,
    kind: str = "",
    investigation: Investigation | None = None,
    user=None,
    source_url: str = "",
    captured_at: datetime | None = None,
) -> Artifact:
    """Copy ``chunks`` to the artifact store; the caller queues the analysis."""
    if kind and kind not in kinds.KINDS:
        raise UploadRejected(f"unknown kind {kind!r}; expected one of {', '.join(kinds.KINDS)}")
    if investigation is not None and investigation.deployment_id != deployment.pk:
        raise UploadRejected("the investigation belongs to another deployment")
    if (
        investigation is not None
        and not Investigation.objects.filter(
            pk=investigation.pk, status=Investigation.Status.OPEN
        ).exists()
    ):  # read now, not from the caller's copy: it may have closed since
        raise ClosedInvestigation.for_closed()
    limit = settings.ATLAS_ARTIFACT_MAX_BYTES
    digest = hashlib.sha256()
    size = 0
    with tempfile.TemporaryFile() as spool:
        for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise UploadRejected(f"the file is larger than the {limit >> 20} MiB limit")
            digest.update(chunk)
            spool.write(chunk)
        if size == 0:
            raise UploadRejected("the file is empty")
        spool.seek(0)
        sha256 = digest.hexdigest()
        with transaction.atomic():
            first = dedup.first_copy(deployment.team_id, sha256)
            if first is None:
                check_quota(deployment.team_id, size)
            artifact = Artifact(
                team_id=deployment.team_id,
                deployment=deployment,
                investigation=investigation,
                kind=kind,
                name=clean_name(name),
                size_bytes=size,
                sha256=sha256,
                source=source,
                source_url=source_url[:2000],
                uploaded_by=user,
                captured_at=captured_at or timezone.now(),
                duplicate_of=first,
            )
            if first is None:
                artifact.file.save("artifact", File(spool), save=False)
            else:  # the team's bytes already: one file, one analysis
                artifact.file.name = first.file.name
            artifact.save()
            if investigation is not None:
                verb = "collected" if source == Source.PROBE else "uploaded"
                then = "analysis queued" if first is None else f"the same file as {first.name}"
                timeline.note(
                    investigation,
                    f"{artifact.name} {verb} ({size:,} bytes); {then}",
                    actor=user,
                    artifact=artifact,
                )
    return artifact
