"""API tokens: created once, stored as a digest, checked without timing leaks."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.utils import timezone

from investigations.models import ApiToken

PREFIX = "atl_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", errors="replace")).hexdigest()


def create_token(*, team, name: str, user) -> tuple[ApiToken, str]:
    """Returns the row and the token text, which is never stored and never shown again."""
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        team=team, name=name, prefix=token[:12], digest=digest(token), created_by=user
    )
    return row, token


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
