"""mozilla-django-oidc's backend, made to link accounts by (iss, sub) and to apply the
group mapping at every sign-in.

The library's code flow, PKCE, nonce and signature checks are used as they are; what
changes is who the token is: the library matches users by e-mail, which would let an IdP
account with a local account's address sign in as it (the break-glass accounts included).
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

import audit
from sso import mapping
from sso.config import groups_from_claim
from sso.models import OidcIdentity

log = logging.getLogger(__name__)
USERNAME_MAX = 150


def _clean_username(raw: str) -> str:
    """Django's username alphabet (letters, digits, ``@.+-_``), cut to fit with room for a
    ``-sso-N`` suffix."""
    return re.sub(r"[^\w.@+-]", "-", raw)[: USERNAME_MAX - 10].strip("-") or "sso-user"


class AtlasOIDCBackend(OIDCAuthenticationBackend):
    def authenticate(self, request, **kwargs):
        # Only the SSO callback passes a nonce; a local login (username and password) must
        # never reach the token endpoint, whatever its query string says.
        if "nonce" not in kwargs or not settings.ATLAS_OIDC_ENABLED:
            return None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token, **kwargs):
        """The library skips the audience check; a token the IdP issued to another client
        is not a sign-in to Atlas."""
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("ID token audience is not this client")
        if not payload.get("sub") or not payload.get("iss"):
            raise SuspiciousOperation("ID token without iss or sub")
        return payload

    def get_or_create_user(self, access_token, id_token, payload):
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") not in (None, payload["sub"]):
            # OIDC Core 5.3.2: a userinfo answer for another subject must not be used.
            raise SuspiciousOperation("userinfo sub differs from the ID token's")
        # Some IdPs put groups only in the ID token (Entra ID), some only in userinfo.
        claims = {**payload, **userinfo}
        groups = groups_from_claim(claims.get(settings.ATLAS_OIDC_GROUPS_CLAIM))
        with transaction.atomic():
            identity = (
                OidcIdentity.objects.select_for_update()
                .select_related("user")
                .filter(issuer=payload["iss"], subject=payload["sub"])
                .first()
            )
            if identity is None:
                user = self._create(claims)
                identity = OidcIdentity.objects.create(
                    user=user, issuer=payload["iss"], subject=payload["sub"]
                )
            user = identity.user
            if not user.is_active:
                log.warning("SSO sign-in refused: %s is deactivated", user.get_username())
                return None
            email = claims.get("email")
            if isinstance(email, str) and email != user.email and len(email) <= 254:
                user.email = email
                user.save(update_fields=["email"])
            identity.groups = groups
            identity.last_login = timezone.now()
            identity.save(update_fields=["groups", "last_login"])
            outcome = mapping.apply(user, groups, settings.ATLAS_OIDC_GROUP_ROLES)
        self._tell(user, groups, outcome)
        return user

    def _create(self, claims):
        """A new account named after the username claim; if a local account holds that
        name, a suffixed one (the local account is never taken over)."""
        users = get_user_model().objects
        raw = claims.get(settings.ATLAS_OIDC_USERNAME_CLAIM) or claims.get("email") or ""
        base = _clean_username(str(raw).split("@")[0] if "@" in str(raw) else str(raw))
        name, n = base, 1
        while users.filter(username__iexact=name).exists():
            n += 1
            name = f"{base}-sso" if n == 2 else f"{base}-sso-{n - 1}"
        email = claims.get("email") if isinstance(claims.get("email"), str) else ""
        user = users.create_user(name, email=email[:254])  # unusable password: SSO only
        audit.record(
            "user.create",
            actor_name=mapping.ACTOR.replace("group mapping", "first sign-in"),
            obj=user,
            summary=f"Created {name} at the first SSO sign-in",
            data={"user": name, "source": "sso"},
        )
        return user

    def _tell(self, user, groups: list[str], outcome: mapping.Outcome) -> None:
        """What the sign-in changed, shown once on the page the user lands on."""
        request = self.request
        for kept in outcome.kept:
            messages.warning(request, f"Single sign-on: {kept}.")
        if outcome.changes:
            messages.info(request, "Single sign-on: " + "; ".join(outcome.changes) + ".")
        if not user.memberships.exists():
            shown = ", ".join(sorted(groups)[:20]) or "none"
            messages.warning(
                request,
                f"Signed in as {user.get_username()}, but your identity provider's groups "
                f"({shown}) give you no team in Atlas. Ask an administrator to map one of "
                "them to a team (ATLAS_OIDC_GROUP_ROLES) or a commander to add you.",
            )
