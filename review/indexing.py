"""Building search documents from the record, in batches: a handful of queries per batch
whatever its size, so ``reindex`` and the seeder stay fast and a single edit stays cheap.

On PostgreSQL the weighted vector is computed by the database in one UPDATE per batch
(title A, root cause B, everything people wrote C); on other databases only the plain text
is stored and the list page searches it with icontains.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence

from django.contrib.postgres.search import SearchVector
from django.db import connection, transaction
from django.db.models import OuterRef, Subquery

from investigations.models import Decision, FixRecord, Investigation
from postmortems.models import SECTIONS, PostmortemVersion
from review import text
from review.models import ReviewComment, SearchDocument

log = logging.getLogger(__name__)

SEARCH_CONFIG = "english"
BATCH_SIZE = 900  # under SQLite's classic 999-parameter limit for the id lists


def uses_full_text() -> bool:
    return connection.vendor == "postgresql"


def weighted_vector() -> SearchVector:
    return (
        SearchVector("title_text", weight="A", config=SEARCH_CONFIG)
        + SearchVector("cause_text", weight="B", config=SEARCH_CONFIG)
        + SearchVector("body_text", weight="C", config=SEARCH_CONFIG)
    )


def document_texts(ids: Sequence) -> dict:
    """Investigation id -> DocumentText for the ids that still exist (five queries)."""
    rows = Investigation.objects.filter(pk__in=ids).values_list(
        "pk", "title", "symptom", "root_cause", "close_override"
    )
    reasons = defaultdict(list)
    for inv, reason in (
        Decision.objects.filter(investigation_id__in=ids)
        .order_by("investigation_id", "sequence")
        .values_list("investigation_id", "reason")
    ):
        reasons[inv].append(reason)
    notes = defaultdict(list)
    for inv, note in (
        FixRecord.objects.filter(investigation_id__in=ids)
        .exclude(note="")
        .order_by("investigation_id", "applied_at")
        .values_list("investigation_id", "note")
    ):
        notes[inv].append(note)
    newest = (
        PostmortemVersion.objects.filter(postmortem=OuterRef("postmortem"))
        .order_by("-number")
        .values("number")[:1]
    )
    narratives = {
        inv: [sections.get(key, "") for key in SECTIONS] if isinstance(sections, dict) else []
        for inv, sections in PostmortemVersion.objects.filter(
            postmortem__investigation_id__in=ids, number=Subquery(newest)
        ).values_list("postmortem__investigation_id", "sections")
    }
    comments = defaultdict(list)
    for inv, body in (
        ReviewComment.objects.filter(investigation_id__in=ids)
        .order_by("investigation_id", "created_at")
        .values_list("investigation_id", "body")
    ):
        comments[inv].append(body)
    return {
        pk: text.compose(
            title=title,
            root_cause=root_cause,
            symptom=symptom,
            narratives=narratives.get(pk, ()),
            reasons=reasons[pk],
            notes=notes[pk],
            override=override,
            comments=comments[pk],
        )
        for pk, title, symptom, root_cause, override in rows
    }


def rebuild(ids: Iterable) -> int:
    """Rebuild the documents of these investigations; documents of ids that no longer exist
    are deleted. Returns how many documents were written."""
    ids = list(dict.fromkeys(ids))
    written = 0
    for start in range(0, len(ids), BATCH_SIZE):
        batch = ids[start : start + BATCH_SIZE]
        written += _rebuild_batch(batch)
    return written


@transaction.atomic
def _rebuild_batch(batch: list) -> int:
    """One batch, all or nothing: a document never keeps new text with an old vector."""
    texts = document_texts(batch)
    gone = [pk for pk in batch if pk not in texts]
    if gone:
        SearchDocument.objects.filter(pk__in=gone).delete()
    if not texts:
        return 0
    SearchDocument.objects.bulk_create(
        [
            SearchDocument(
                investigation_id=pk,
                title_text=doc.title,
                cause_text=doc.cause,
                body_text=doc.body,
            )
            for pk, doc in texts.items()
        ],
        update_conflicts=True,
        unique_fields=["investigation"],
        update_fields=["title_text", "cause_text", "body_text", "updated_at"],
    )
    if uses_full_text():
        SearchDocument.objects.filter(pk__in=list(texts)).update(vector=weighted_vector())
    return len(texts)


def rebuild_all(queryset=None, batch_size: int = BATCH_SIZE * 5) -> int:
    """Every investigation's document (or those of ``queryset``), in id order, batch by batch
    so memory stays flat on a large install."""
    queryset = Investigation.objects.all() if queryset is None else queryset
    ids = list(queryset.order_by("pk").values_list("pk", flat=True))
    written = 0
    for start in range(0, len(ids), batch_size):
        written += rebuild(ids[start : start + batch_size])
    return written
