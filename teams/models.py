"""Teams own everything an investigation touches.

A membership's role decides what a person may do there.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    # Ordered from least to most privileged; see ROLE_RANK.
    VIEWER = "viewer", "Viewer"
    RESPONDER = "responder", "Responder"
    COMMANDER = "commander", "Commander"


ROLE_RANK = {Role.VIEWER: 0, Role.RESPONDER: 1, Role.COMMANDER: 2}


class Team(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="teams"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_role_per_team")]
        ordering = ["team", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} ({self.role}) in {self.team}"

    def allows(self, minimum: Role) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[minimum]
