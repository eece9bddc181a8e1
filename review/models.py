"""What the review adds to the record: one search document per investigation, and
comments people leave when they look back at an incident.

The search document is derived data, rebuilt from the record (``review.indexing``) whenever
a part of it changes and by ``manage.py reindex``; nothing reads it as a source of truth.
Its plain-text columns serve the SQLite fallback and the highlighted excerpts; ``vector``
(PostgreSQL only; left empty on SQLite) is the weighted tsvector the list page ranks by.
Its GIN index is created by the migration on PostgreSQL only, so it is not declared here.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.search import SearchVectorField
from django.db import models

from investigations.models import Investigation

COMMENT_MAX_CHARS = 4000


class SearchDocument(models.Model):
    investigation = models.OneToOneField(
        Investigation, on_delete=models.CASCADE, primary_key=True, related_name="search_document"
    )
    title_text = models.TextField(blank=True, help_text="Weight A: the investigation's title.")
    cause_text = models.TextField(
        blank=True, help_text="Weight B: the root cause key and what the cause is."
    )
    body_text = models.TextField(
        blank=True,
        help_text="Weight C: narratives, decision reasons, fix notes, override, comments.",
    )
    vector = SearchVectorField(null=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Search document of {self.investigation_id}"


class ReviewComment(models.Model):
    """A remark made while reviewing a past investigation. Rows are never edited."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    investigation = models.ForeignKey(
        Investigation, on_delete=models.CASCADE, related_name="review_comments"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    body = models.TextField(max_length=COMMENT_MAX_CHARS)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["investigation", "created_at"]
        indexes = [models.Index(fields=["investigation", "created_at"])]

    def __str__(self) -> str:
        return f"Comment on {self.investigation_id} by {self.author_id}"
