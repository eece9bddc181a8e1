"""The audit log: who did what to which team's rows, kept even after the rows are gone.

Append-only. ``save()`` refuses to update an existing entry, and deleting (one row or a
queryset) is refused unless it runs inside ``audit.admin.purging()``, which only the
superuser-only admin action enters. On PostgreSQL a trigger (migration 0002) refuses
UPDATE and DELETE at the database too, unless that transaction set
``atlas.audit_purge``; raw SQL cannot rewrite history either.

The foreign keys have no database constraint and ``DO_NOTHING`` on delete: removing a
user, team or investigation must neither cascade into the log nor rewrite its rows, so
every entry also carries the names as text (``actor_name``, ``summary``).
"""

from __future__ import annotations

import contextvars

from django.conf import settings
from django.db import models
from django.utils import timezone

# Set only by audit.admin.purging(); a ContextVar so one thread's purge never opens
# the door for another request.
PURGING: contextvars.ContextVar[bool] = contextvars.ContextVar("audit_purging", default=False)


class AppendOnlyError(Exception):
    """Someone tried to change or delete an audit entry outside the admin purge path."""


class Action(models.TextChoices):
    INVESTIGATION_OPEN = "investigation.open", "Investigation opened"
    DECISION = "decision", "Decision"
    FIX = "fix", "Fix recorded"
    CLOSE = "investigation.close", "Investigation closed"
    CLOSE_OVERRIDE = "investigation.close_override", "Closed with override"
    DEPLOYMENT_CREATE = "deployment.create", "Deployment created"
    DEPLOYMENT_UPDATE = "deployment.update", "Deployment or budget changed"
    TARGET_CREATE = "target.create", "Probe target added"
    TARGET_ENABLE = "target.enable", "Probe target enabled"
    TARGET_DISABLE = "target.disable", "Probe target disabled"
    TEAM_CREATE = "team.create", "Team created"
    TEAM_UPDATE = "team.update", "Team changed"
    TEAM_DELETE = "team.delete", "Team deleted"
    MEMBER_ADD = "member.add", "Member added"
    ROLE_CHANGE = "member.role", "Role changed"
    MEMBER_REMOVE = "member.remove", "Member removed"
    INVITATION_CREATE = "invitation.create", "Invitation sent"
    INVITATION_ACCEPT = "invitation.accept", "Invitation accepted"
    INVITATION_DECLINE = "invitation.decline", "Invitation declined"
    INVITATION_REVOKE = "invitation.revoke", "Invitation revoked"
    DEPLOYMENT_DELETE = "deployment.delete", "Deployment deleted"
    USER_CREATE = "user.create", "User created"
    USER_UPDATE = "user.update", "User changed (staff, superuser, active)"
    USER_DELETE = "user.delete", "User deleted"
    LOGIN_LOCKOUT = "login.lockout", "Login locked out"
    NARRATIVE = "postmortem.narrative", "Postmortem narrative saved"
    EXPORT = "postmortem.export", "Postmortem export requested"
    REVIEW_REQUEST = "postmortem.review_request", "Postmortem review requested"
    PUBLISH = "postmortem.publish", "Postmortem published"
    ACTION_ITEM_ADD = "postmortem.action_item", "Action item added"
    ACTION_ITEM_DONE = "postmortem.action_item_done", "Action item done"
    TOKEN_CREATE = "token.create", "API token created"
    TOKEN_REVOKE = "token.revoke", "API token revoked"
    DRILL_START = "drill.start", "Drill started"
    DRILL_FINISH = "drill.finish", "Drill finished"
    SEVERITY = "investigation.severity", "Severity set or changed"
    STATUS_UPDATE = "investigation.status_update", "Status update posted"
    INCIDENT_STATUS = "investigation.status", "Incident status changed"
    ROLE = "investigation.role", "Incident role assigned or released"
    HANDOVER = "investigation.handover", "Command handed over"


class AuditQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError("audit entries are never updated")

    def delete(self):
        if not PURGING.get():
            raise AppendOnlyError("audit entries are only deleted by an administrator's purge")
        return super().delete()


def action_choices() -> list[tuple[str, str]]:
    """``AuditEntry.action``'s choices, read from ``Action`` when needed. A callable, so a
    migration holds a reference instead of a copy of the list: a new audited action was a
    migration rewriting every choice (the database never sees them)."""
    return list(Action.choices)


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    actor_name = models.CharField(max_length=200, help_text="Who, as text that outlives users.")
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    investigation = models.ForeignKey(
        "investigations.Investigation",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    action = models.CharField(max_length=40, choices=action_choices)
    object_type = models.CharField(max_length=60)
    object_id = models.CharField(max_length=64)
    summary = models.CharField(max_length=500)
    data = models.JSONField(default=dict, blank=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["team", "-at"]),
            models.Index(fields=["investigation", "-at"]),
        ]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise AppendOnlyError("audit entries are never updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if not PURGING.get():
            raise AppendOnlyError("audit entries are only deleted by an administrator's purge")
        return super().delete(*args, **kwargs)
