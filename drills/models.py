"""Drill ranges (a team's practice deployment on a simulator) and the drills run on them.

A drill's scenario and ground truth live here, never on the investigation: the trainee
sees an ordinary investigation titled by its symptom, marked as a drill.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from deployments.models import Deployment
from investigations.models import Investigation
from teams.models import Team


class DrillRange(models.Model):
    """A deployment whose probe targets point at an enginesim the console may redeploy."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="drill_ranges")
    deployment = models.OneToOneField(
        Deployment, on_delete=models.CASCADE, related_name="drill_range"
    )
    simulator_url = models.URLField(
        max_length=200, help_text="Base URL of the enginesim serving this deployment."
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "deployment__name"]

    def __str__(self) -> str:
        return f"drill range {self.deployment.name}"

    def clean(self) -> None:
        if self.deployment_id and self.deployment.team_id != self.team_id:
            raise ValidationError("The deployment must belong to the range's team.")
        if not self.simulator_url.startswith("http://"):
            raise ValidationError("The simulator serves plain http://.")


class Drill(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    range = models.ForeignKey(DrillRange, on_delete=models.CASCADE, related_name="drills")
    investigation = models.OneToOneField(
        Investigation, on_delete=models.CASCADE, related_name="drill"
    )
    scenario = models.CharField(max_length=64)
    truth_causes = models.JSONField(default=list, help_text="The simulator's cause keys.")
    seed = models.BigIntegerField()
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    finished_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["range"],
                condition=models.Q(finished_at__isnull=True),
                name="one_active_drill_per_range",
            )
        ]

    def __str__(self) -> str:
        return f"drill {self.investigation.title}"

    @property
    def finished(self) -> bool:
        return self.finished_at is not None
