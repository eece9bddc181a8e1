"""What the probe workers record about themselves."""

from __future__ import annotations

import uuid

from django.db import models


class WorkerHeartbeat(models.Model):
    """One row per beat tick that a worker executed.

    Pages read the newest row to tell the commander whether evidence is still
    flowing ("probes paused" when the broker or every worker is down). The tick
    id is unique, so a redelivered task cannot record the same beat twice.
    """

    tick = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    hostname = models.CharField(max_length=255)
    queue = models.CharField(max_length=100, blank=True)
    sent_at = models.DateTimeField(help_text="When the beat was scheduled (from the message).")
    recorded_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-recorded_at"]

    def __str__(self) -> str:
        return f"{self.hostname} at {self.recorded_at:%H:%M:%S}"
