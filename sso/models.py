"""Which Atlas account an identity at the IdP signs in as.

A person is recognised by the ID token's ``iss`` and ``sub`` (stable at every IdP),
never by username or e-mail: an IdP user called ``commander`` must not become the local
break-glass account of that name. The first sign-in creates the account and this link.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class OidcIdentity(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # The groups the IdP sent at the last sign-in, to show on the account's pages and to
    # explain the mapping's outcome ("your groups ... map to no team").
    groups = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    last_login = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_account_per_identity")
        ]
        verbose_name = "OIDC identity"
        verbose_name_plural = "OIDC identities"

    def __str__(self) -> str:
        return f"{self.user} <- {self.subject} at {self.issuer}"
