"""Identical artifact bytes are stored once and analysed once, per team.

Issue 19, finding 3: 20 uploads of the same 5 MB were 20 files, 20 quota shares and 20
analyses; a hostile client could repeat one 4 GiB-expanding trace to hold the artifact
workers for as long as it liked. Now a later upload with the same ``sha256`` in the same
team is a row of its own (who sent it, where, when) that names the team's first copy in
``duplicate_of``, shares its file and takes its analysis once that is done.

The scope is the team and nothing wider: a lookup across teams would tell an uploader, by
an instant "done", that another team holds the file.

The hand-over between the first copy's analysis and a duplicate's task is ordered by the
first copy's row lock: the analysis finishes by updating that row (which locks it) and
then shares with every committed duplicate in the same transaction; a duplicate's task
reads the first copy ``FOR UPDATE``, so it either waits for that commit and sees the
result, or sees the copy still pending while its own row is already committed, where the
sharing step will find it. Either way each duplicate is settled exactly once (the copy
is conditional on the duplicate still being queued).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from artifacts import evidence, kinds, timeline
from artifacts.models import Artifact, Status

PENDING = (Status.QUEUED, Status.ANALYSING)


def first_copy(team_id: int, sha256: str) -> Artifact | None:
    """The team's first artifact with these bytes whose file is still on disk, locked
    (``FOR UPDATE``) for the caller's transaction; ``None`` if the team has none."""
    candidates = (
        Artifact.objects.select_for_update()
        .filter(team_id=team_id, sha256=sha256, duplicate_of__isnull=True)
        .order_by("created_at", "pk")
    )
    for candidate in candidates[:5]:
        if candidate.file and candidate.file.storage.exists(candidate.file.name):
            return candidate
    return None


def used_bytes(team_id: int) -> int:
    """The team's stored artifact bytes, each distinct content once (duplicates share a
    file, so they cost nothing more)."""
    sizes = (
        Artifact.objects.filter(team_id=team_id)
        .order_by()
        .values("sha256")
        .annotate(size=Max("size_bytes"))
        .values_list("size", flat=True)
    )
    return sum(sizes)


def reusable(first: Artifact, duplicate: Artifact) -> bool:
    """Whether the first copy's finished analysis is exactly what the duplicate's own
    would be: the same bytes, the same declared kind (or none), and, for a gc log, the
    same deployment (its pauses are correlated with that deployment's latencies)."""
    if first.status == Status.DONE:
        if duplicate.kind not in ("", first.kind):
            return False
        return first.kind != kinds.GC_LOG or first.deployment_id == duplicate.deployment_id
    if first.status == Status.REJECTED:
        # The same bytes under the same declared kind are refused for the same reason (a
        # bomb that ran out of time is not retried by uploading it again).
        return duplicate.kind == first.kind
    return False


def take_analysis(first: Artifact, duplicate: Artifact) -> str | None:
    """Give a queued duplicate the first copy's finished result (row, evidence, timeline);
    returns the status it took, or ``None`` when it was no longer queued."""
    with transaction.atomic():
        taken = Artifact.objects.filter(pk=duplicate.pk, status=Status.QUEUED).update(
            status=first.status,
            kind=first.kind,
            analysis=first.analysis,
            signals=first.signals,
            reason=first.reason,
            analysed_at=timezone.now(),
            analysis_seconds=None,
        )
        if not taken:
            return None
        if first.status == Status.DONE:
            evidence.record_signals(
                duplicate.pk, duplicate.deployment_id, duplicate.captured_at, first.signals
            )
        if duplicate.investigation_id is not None:
            verdict = "analysed" if first.status == Status.DONE else f"rejected: {first.reason}"
            timeline.note(
                duplicate.investigation_id,
                f"{duplicate.name}: the same file as {first.name}, already {verdict}",
                artifact=duplicate,
            )
    return str(first.status)
