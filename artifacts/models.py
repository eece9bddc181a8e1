"""Profiler artifacts attached to a deployment (and usually an investigation).

The file is kept as received; its analysis is computed once by a worker and stored, so pages
and evaluation never re-parse a 200 MB trace. ``signals`` is the flat part of the analysis that
playbook checks read (source ``artifact``).

Identical bytes are kept once per team (issue 19, finding 3): a later upload of the same
content (same ``sha256``, same team) is its own row, for the record of who sent what where,
but ``duplicate_of`` names the first row, it shares that row's file and takes its analysis
instead of running another. Never across teams: a team cannot learn that another team has
a file.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from deployments.models import Deployment
from investigations.models import Investigation
from teams.models import Team


class Kind(models.TextChoices):
    MEMORY_SNAPSHOT = "memory-snapshot", "CUDA memory snapshot (pickle)"
    CHROME_TRACE = "chrome-trace", "torch.profiler Chrome trace (.json / .json.gz)"
    GC_LOG = "gc-log", "Python gc DEBUG_STATS log"


class Status(models.TextChoices):
    QUEUED = "queued", "Queued"
    ANALYSING = "analysing", "Analysing"
    DONE = "done", "Done"
    REJECTED = "rejected", "Rejected"


class Source(models.TextChoices):
    UPLOAD = "upload", "Uploaded in the browser"
    API = "api", "Uploaded through the API"
    PROBE = "probe", "Collected by a probe"


def _upload_path(instance: Artifact, filename: str) -> str:
    # Never the client's file name on disk: it is shown, not trusted.
    return f"artifacts/{instance.team_id}/{instance.id}"


class Artifact(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="artifacts")
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="artifacts")
    investigation = models.ForeignKey(
        Investigation, null=True, blank=True, on_delete=models.SET_NULL, related_name="artifacts"
    )
    kind = models.CharField(max_length=32, choices=Kind.choices, blank=True)
    name = models.CharField(max_length=255, help_text="The file name as given, for display.")
    file = models.FileField(upload_to=_upload_path, max_length=255)
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    source = models.CharField(max_length=16, choices=Source.choices)
    source_url = models.URLField(max_length=2000, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    captured_at = models.DateTimeField(
        help_text="When the artifact describes (collection time, else upload time)."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    reason = models.TextField(blank=True, help_text="Why the file was rejected.")
    analysis = models.JSONField(null=True, blank=True)
    signals = models.JSONField(default=dict, blank=True)
    analysed_at = models.DateTimeField(null=True, blank=True)
    analysis_seconds = models.FloatField(null=True, blank=True)
    duplicate_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        # Deleting the first row leaves its duplicates whole: each holds the file's name and
        # its own copy of the analysis; the oldest of them is then the team's first copy.
        on_delete=models.SET_NULL,
        related_name="duplicates",
        help_text="The team's first artifact with the same bytes: its file and analysis.",
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["deployment", "status", "captured_at"]),
            models.Index(fields=["team", "sha256"]),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display() or 'artifact'} {self.name}"

    @property
    def findings(self) -> list[dict]:
        return list((self.analysis or {}).get("findings", []))
