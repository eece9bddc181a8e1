"""Teams own everything an investigation touches.

A membership's role decides what a person may do there. People join a team only by
accepting an invitation (``Invitation``): a commander cannot add someone without their
consent, and cannot learn from the answer whether an account exists.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone


class Role(models.TextChoices):
    # Ordered from least to most privileged; see ROLE_RANK.
    VIEWER = "viewer", "Viewer"
    RESPONDER = "responder", "Responder"
    COMMANDER = "commander", "Commander"


ROLE_RANK = {Role.VIEWER: 0, Role.RESPONDER: 1, Role.COMMANDER: 2}


class Team(models.Model):
    """A tenant. Its name is a label, not an identifier (pages and the API address teams by
    UUID), so it is unique only per creator: a globally unique name would let anyone learn
    which names other tenants use by trying to create them (issue 19.12)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100)
    created = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who created it from the Teams page (empty for the admin and scripts).",
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="teams"
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            # The race backstop of teams.actions.create_team's check, which looks at the
            # teams the creator belongs to (names they can already see) and nothing else.
            models.UniqueConstraint(
                Lower("name"), "created_by", name="team_name_unique_per_creator"
            ),
        ]

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


class InvitationQuerySet(models.QuerySet):
    def pending(self):
        """Not yet answered, revoked or expired (expiry is read, never written)."""
        return self.filter(status=Invitation.Status.PENDING, expires_at__gt=timezone.now())

    def addressed_to(self, user):
        """Invitations naming this user by username or by e-mail address. E-mail addresses
        are set by administrators here (no self-service profile), so matching on them
        cannot be used to claim someone else's invitation."""
        names = models.Q(invitee=user.get_username())
        email = (getattr(user, "email", "") or "").strip().lower()
        if email:
            names |= models.Q(invitee=email)
        return self.filter(names)


class Invitation(models.Model):
    """An offer of a role in a team, to a username or an e-mail address as typed.

    Stored whether or not an account matches (``invitee`` is text, never a user id): the
    inviter sees the same answer and the same pending row either way, so inviting is not a
    way to test which usernames or addresses exist. Matched against the signed-in user only
    when they look at their own invitations; accepting creates the membership."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        ACCEPTED = "accepted", "Accepted"
        DECLINED = "declined", "Declined"
        REVOKED = "revoked", "Revoked"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    invitee = models.CharField(
        max_length=254, help_text="A username, or an e-mail address in lower case."
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)

    objects = InvitationQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["invitee", "status"])]

    def __str__(self) -> str:
        return f"{self.invitee} as {self.role} in {self.team}"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.PENDING and self.expires_at > timezone.now()
