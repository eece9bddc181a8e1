"""Whether the login page offers "Sign in with SSO" (read per request, so tests and a
settings change need no restart of the URL configuration)."""

from django.conf import settings
from django.http import HttpRequest


def sso(request: HttpRequest) -> dict:
    return {"SSO_ENABLED": getattr(settings, "ATLAS_OIDC_ENABLED", False)}
