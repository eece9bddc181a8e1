"""API tokens: created once, stored as a digest, checked without timing leaks."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.db import transaction
from django.utils import timezone

import audit
from investigations.models import ApiToken

PREFIX = "atl_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", errors="replace")).hexdigest()


@transaction.atomic
def create_token(*, team, name: str, user) -> tuple[ApiToken, str]:
    """Returns the row and the token text, which is never stored and never shown again."""
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        team=team, name=name, prefix=token[:12], digest=digest(token), created_by=user
    )
    audit.record(
        "token.create",
        actor=user,
        team=team,
        obj=row,
        summary=f"API token {name} ({row.prefix}…) created",
    )
    return row, token


@transaction.atomic
def revoke_token(*, team, token_id, user) -> ApiToken | None:
    """Revoke a live token of this team; None when there is no such live token."""
    row = (
        ApiToken.objects.select_for_update()
        .filter(team=team, pk=token_id, revoked_at__isnull=True)
        .first()
    )
    if row is None:
        return None
    row.revoked_at = timezone.now()
    row.save(update_fields=["revoked_at"])
    audit.record(
        "token.revoke",
        actor=user,
        team=team,
        obj=row,
        summary=f"API token {row.name} ({row.prefix}…) revoked",
    )
    return row


def authenticate(header: str) -> ApiToken | None:
    """The live token a ``Bearer`` header names, or None. The lookup is by digest, and the
    final comparison is constant-time, so neither reveals how much of a guess was right."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.startswith(PREFIX) or len(token) > 200:
        return None
    wanted = digest(token.strip())
    row = ApiToken.objects.select_related("team").filter(digest=wanted).first()
    if row is None or not hmac.compare_digest(row.digest, wanted) or row.revoked_at:
        return None
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
    return row
