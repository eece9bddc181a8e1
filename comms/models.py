"""A team's chat webhooks, the status updates posted on an investigation, and one
delivery per (update, webhook): the row that makes sending idempotent."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from investigations.models import Investigation
from teams.models import Team


class ChatKind(models.TextChoices):
    SLACK = "slack", "Slack"
    MATTERMOST = "mattermost", "Mattermost"
    TEAMS = "teams", "Microsoft Teams"


class ChatWebhook(models.Model):
    """An incoming-webhook URL of a chat channel. The URL is a secret (anyone holding it
    can post to the channel): shown to commanders only, never in the audit or the page."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="chat_webhooks")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=ChatKind.choices)
    url = models.URLField(max_length=2000)
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"


class StatusUpdate(models.Model):
    """A short "current status" post: what responders tell everyone else, with its time."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    investigation = models.ForeignKey(
        Investigation, on_delete=models.CASCADE, related_name="status_updates"
    )
    text = models.TextField(max_length=2000)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    author_name = models.CharField(max_length=200, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.text[:60]}"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    RETRYING = "retrying", "Retrying"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """One update to one webhook. Unique per pair, and a sent row is never sent again, so
    a task delivered twice (a retry racing a redelivery, a double enqueue) posts once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    update = models.ForeignKey(StatusUpdate, on_delete=models.CASCADE, related_name="deliveries")
    webhook = models.ForeignKey(ChatWebhook, on_delete=models.CASCADE, related_name="deliveries")
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # Held while one worker is sending, so a second copy of the task skips the row.
    claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["update", "webhook"], name="one_delivery_per_webhook")
        ]
        ordering = ["-update__at"]

    def __str__(self) -> str:
        return f"{self.update_id} -> {self.webhook_id}: {self.state}"
