"""The postmortem of an investigation: what people write on top of the record.

The record itself (timeline, decisions and their frozen evidence, the fix, its
verification, the regression gate) is never copied here; ``postmortems.record`` reads it
from the investigation every time the document is rendered. What lives here is only what
the record cannot know: the narrative (kept as numbered versions, newest current, each
attributed), the action items, and the exports rendered from both.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from investigations.models import Investigation
from teams.models import Team

# The editable narrative sections, in the order the document shows them.
# Detection and resolution are filled in from the record; these are what people add to it.
SECTIONS = {
    "summary": "Summary",
    "impact_notes": "Impact notes",
    "trigger": "Trigger",
    "detection_notes": "Detection notes",
    "resolution_notes": "Resolution notes",
    "went_well": "What went well",
    "went_wrong": "What went wrong",
    "lucky": "Where we got lucky",
    "narrative": "Narrative",
}
LESSONS = ("went_well", "went_wrong", "lucky")
SECTION_MAX_CHARS = 20_000


class Postmortem(models.Model):
    """One per investigation, created on the first edit (reading one writes nothing)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="postmortems")
    investigation = models.OneToOneField(
        Investigation, on_delete=models.CASCADE, related_name="postmortem"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Postmortem of {self.investigation}"


class ReviewState(models.TextChoices):
    DRAFT = "draft", "Draft"
    IN_REVIEW = "in_review", "In review"
    PUBLISHED = "published", "Published"


class PostmortemVersion(models.Model):
    """One saved state of the narrative. Its text is never edited: an edit adds a version.

    The review workflow moves a version draft -> in review -> published (conditional
    updates of ``review_state`` and who/when, nothing else). A published version stays
    as it is, with the Markdown it read as when published; later edits are new versions
    (drafts) on top of it, so what was published can always be read again.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    postmortem = models.ForeignKey(Postmortem, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    sections = models.JSONField(default=dict, help_text="Section key -> text (see SECTIONS).")
    comment = models.CharField(max_length=500, blank=True, help_text="Why it was edited.")
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    review_state = models.CharField(
        max_length=16, choices=ReviewState.choices, default=ReviewState.DRAFT
    )
    review_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    review_requested_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewer_name = models.CharField(
        max_length=200, blank=True, help_text="The reviewer, as text that outlives users."
    )
    published_at = models.DateTimeField(null=True, blank=True)
    published_markdown = models.TextField(
        blank=True, help_text="The whole document as it read when published."
    )

    class Meta:
        ordering = ["postmortem", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["postmortem", "number"], name="one_version_per_number"),
            models.CheckConstraint(
                condition=models.Q(review_state__in=ReviewState.values),
                name="version_review_state_known",
            ),
            # In review or published: someone asked for the review, at a time.
            models.CheckConstraint(
                condition=models.Q(review_state=ReviewState.DRAFT)
                | models.Q(review_requested_at__isnull=False),
                name="version_review_requested_when_reviewed",
            ),
            # Published exactly when a reviewer and a date are recorded.
            models.CheckConstraint(
                condition=(
                    models.Q(
                        review_state=ReviewState.PUBLISHED,
                        published_at__isnull=False,
                        reviewer_name__gt="",
                    )
                    | (
                        ~models.Q(review_state=ReviewState.PUBLISHED)
                        & models.Q(published_at__isnull=True, reviewer_name="")
                    )
                ),
                name="version_published_with_reviewer_and_date",
            ),
        ]

    def __str__(self) -> str:
        return f"v{self.number} of {self.postmortem_id}"


class ActionItem(models.Model):
    class Type(models.TextChoices):
        MITIGATE = "mitigate", "Mitigate"
        PREVENT = "prevent", "Prevent"
        DETECT = "detect", "Detect"
        PROCESS = "process", "Process"

    class Priority(models.TextChoices):
        P0 = "p0", "P0 (now)"
        P1 = "p1", "P1 (this week)"
        P2 = "p2", "P2 (this quarter)"
        P3 = "p3", "P3 (when possible)"

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        DONE = "done", "Done"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    postmortem = models.ForeignKey(
        Postmortem, on_delete=models.CASCADE, related_name="action_items"
    )
    title = models.CharField(max_length=300)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    owner_text = models.CharField(
        max_length=200, blank=True, help_text="An owner who is not a user here (a team, a vendor)."
    )
    due = models.DateField(null=True, blank=True)
    type = models.CharField(max_length=16, choices=Type.choices)
    priority = models.CharField(max_length=2, choices=Priority.choices, default=Priority.P2)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["postmortem", "created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(type__in=["mitigate", "prevent", "detect", "process"]),
                name="action_item_type_known",
            ),
            models.CheckConstraint(
                condition=models.Q(priority__in=["p0", "p1", "p2", "p3"]),
                name="action_item_priority_known",
            ),
            # Done exactly when it was closed at a time.
            models.CheckConstraint(
                condition=models.Q(status="open", closed_at__isnull=True)
                | models.Q(status="done", closed_at__isnull=False),
                name="action_item_done_when_closed",
            ),
        ]

    def __str__(self) -> str:
        return self.title

    def is_overdue(self, today) -> bool:
        return self.status == self.Status.OPEN and self.due is not None and self.due < today

    @property
    def owner_name(self) -> str:
        return self.owner.get_username() if self.owner_id else self.owner_text


def _export_path(instance: Export, filename: str) -> str:
    # Never a user-supplied name on disk; the download names the file.
    return f"postmortems/{instance.team_id}/{instance.id}.{instance.extension}"


class Export(models.Model):
    """A rendered file of the postmortem. The row is the job's truth: the page polls it."""

    class Format(models.TextChoices):
        MARKDOWN = "markdown", "Markdown"
        PDF = "pdf", "PDF"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RENDERING = "rendering", "Rendering"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    CONTENT_TYPES = {Format.MARKDOWN: "text/markdown; charset=utf-8", Format.PDF: "application/pdf"}
    EXTENSIONS = {Format.MARKDOWN: "md", Format.PDF: "pdf"}

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="postmortem_exports")
    postmortem = models.ForeignKey(Postmortem, on_delete=models.CASCADE, related_name="exports")
    format = models.CharField(max_length=16, choices=Format.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    reason = models.TextField(blank=True, help_text="Why rendering failed.")
    file = models.FileField(upload_to=_export_path, max_length=255, blank=True)
    # Where the investigation lives, as the requester saw it: the alert rule links back.
    base_url = models.CharField(max_length=500, blank=True)
    version_number = models.PositiveIntegerField(
        default=0, help_text="The narrative version rendered (0: none written yet)."
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "started_at"])]

    def __str__(self) -> str:
        return f"{self.format} export {self.id} ({self.status})"

    @property
    def extension(self) -> str:
        return self.EXTENSIONS[self.Format(self.format)]

    @property
    def content_type(self) -> str:
        return self.CONTENT_TYPES[self.Format(self.format)]

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)
