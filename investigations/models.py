"""Investigations opened on a deployment, and what happened in them (decisions,
timeline, fixes), plus the team's API tokens. Deployments themselves live below, in
``deployments``."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from deployments.models import Deployment
from investigations.choices import (
    DecisionAction,
    EventKind,
    IncidentRole,
    IncidentStatus,
    Severity,
)
from teams.models import Team


class Investigation(models.Model):
    class Status(models.TextChoices):
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="investigations")
    deployment = models.ForeignKey(
        Deployment, on_delete=models.PROTECT, related_name="investigations"
    )
    symptom = models.CharField(max_length=64)
    title = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    # "" until someone sets it; every setting is a timeline event with its reason.
    severity = models.CharField(max_length=8, choices=Severity.choices(), blank=True)
    # Where the incident stands (investigating ... resolved), beside ``status`` (open or
    # closed: whether the record may still change). Every move is a timeline event.
    incident_status = models.CharField(
        max_length=16,
        choices=IncidentStatus.choices(),
        default=IncidentStatus.INVESTIGATING.value,
    )
    is_drill = models.BooleanField(default=False)
    opened_at = models.DateTimeField(auto_now_add=True)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    opened_by_name = models.CharField(
        max_length=200,
        blank=True,
        help_text="Who or what opened it (a person, an API token, an alert), as text that "
        "outlives users; the record reads this, never the timeline's wording.",
    )
    closed_at = models.DateTimeField(null=True, blank=True)
    root_cause = models.CharField(max_length=64, blank=True)
    alert_fingerprint = models.CharField(max_length=64, blank=True, db_index=True)
    # What the last poll cycle's evaluation said, to turn changes into timeline events.
    last_evaluated_at = models.DateTimeField(null=True, blank=True)
    last_suggestions = models.JSONField(default=dict, blank=True)
    alarm_firing = models.BooleanField(null=True)
    close_override = models.TextField(
        max_length=4000, blank=True, help_text="Why it was closed without a passing verification."
    )
    # The record, frozen (investigations/frozen.py): the playbook as it opened, the
    # verification, gate and chart as it closed. The postmortem reads these, never the
    # live playbook file or a re-run of the evaluation.
    playbook_version = models.PositiveIntegerField(null=True, blank=True)
    playbook_digest = models.CharField(max_length=64, blank=True)
    playbook_facts = models.JSONField(
        default=dict, blank=True, help_text="What the record needs of the playbook it opened with."
    )
    closing_facts = models.JSONField(
        default=dict,
        blank=True,
        help_text="Verification, regression gate and chart as computed when it closed.",
    )

    class Meta:
        ordering = ["-opened_at"]
        indexes = [models.Index(fields=["deployment", "status"])]

    def __str__(self) -> str:
        return self.title or f"{self.symptom} on {self.deployment}"


class Decision(models.Model):
    """A person's (or an auto-apply rule's) verdict on one hypothesis, with the evidence
    as it was shown at that moment. Rows are never edited: a later decision supersedes."""

    Action = DecisionAction

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    investigation = models.ForeignKey(
        Investigation, on_delete=models.CASCADE, related_name="decisions"
    )
    node = models.CharField(max_length=64)
    action = models.CharField(max_length=16, choices=DecisionAction.choices())
    reason = models.TextField(max_length=4000)
    evidence = models.JSONField(default=dict, help_text="The node's checks, frozen.")
    automatic = models.BooleanField(default=False)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(auto_now_add=True)
    sequence = models.PositiveIntegerField(help_text="Order within the investigation.")

    class Meta:
        ordering = ["investigation", "sequence"]
        constraints = [
            models.UniqueConstraint(
                fields=["investigation", "sequence"], name="one_decision_per_sequence"
            )
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.node}"


class TimelineEvent(models.Model):
    """What happened, in order: opened, decisions, fixes, verification, closed.

    Written only through ``investigations.timeline.record_event``; ``kind`` says what it
    is and ``data`` what other modules read back (the summary is for people)."""

    Kind = EventKind

    investigation = models.ForeignKey(
        Investigation, on_delete=models.CASCADE, related_name="timeline"
    )
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=32, choices=EventKind.choices())
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(
        max_length=200,
        blank=True,
        help_text="Who, as text that outlives users: a username, or the automation that "
        "acted (an API token by name, an alert, the automatic rule). Empty on rows written "
        "before it was stored.",
    )
    summary = models.CharField(max_length=500)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["investigation", "at", "pk"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.summary}"

    @property
    def shown_actor(self) -> str:
        """Who to show: the user's current name, else the stored name, else automation."""
        if self.actor is not None:
            return self.actor.get_username()
        return self.actor_name or "automation"


class RoleAssignment(models.Model):
    """Who holds an incident role in one investigation, from when until when. Rows are
    never deleted: a handover or a release ends one (``ended_at``), so the roles anyone
    held stay on the record. Written only by ``investigations.actions``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="roles")
    role = models.CharField(max_length=16, choices=IncidentRole.choices())
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    user_name = models.CharField(
        max_length=200, help_text="The holder, as text that outlives users."
    )
    assigned_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["investigation", "assigned_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["investigation", "role"],
                condition=models.Q(ended_at__isnull=True)
                & ~models.Q(role=IncidentRole.RESPONDER.value),
                name="one_holder_per_incident_role",
            ),
            models.UniqueConstraint(
                fields=["investigation", "role", "user"],
                condition=models.Q(ended_at__isnull=True),
                name="one_current_assignment_per_person_and_role",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_role_display()}: {self.user_name}"

    @property
    def shown_name(self) -> str:
        return self.user.get_username() if self.user is not None else self.user_name


class FixRecord(models.Model):
    """A fix someone applied for a confirmed cause; its verification runs from ``applied_at``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="fixes")
    node = models.CharField(max_length=64)
    key = models.CharField(max_length=64)
    parameters = models.JSONField(default=dict)
    note = models.TextField(max_length=4000, blank=True)
    applied_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    applied_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["investigation", "-applied_at"]

    def __str__(self) -> str:
        return f"{self.key} for {self.node}"


class ApiToken(models.Model):
    """A team's token for the JSON API and the Alertmanager webhook. Only a SHA-256 digest
    is stored; the token itself is shown once, when it is created."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team", "-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
