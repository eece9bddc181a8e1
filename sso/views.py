"""The two SSO endpoints: start (redirect to the IdP with state, nonce and a PKCE
challenge) and callback (code -> tokens -> account). Both are routed always and answer 404
while SSO is off, so the URL set (and the permission matrix) is the same either way.

The library's callback redirects to a failure URL on some errors and raises on others (a
state it never issued is SuspiciousOperation, a refused code an HTTPError, an unreachable
IdP a ConnectionError): here every failure is a page that says what happened and offers
the way back, with 400 for a request Atlas cannot accept and 502 when the IdP failed.
"""

from __future__ import annotations

import logging

import requests
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from audit.text import safe_text

log = logging.getLogger(__name__)


def _require_enabled() -> None:
    if not getattr(settings, "ATLAS_OIDC_ENABLED", False):
        raise Http404("single sign-on is not configured")


def failed(request: HttpRequest, reason: str, *, status: int = 400) -> HttpResponse:
    return render(request, "sso/failed.html", {"reason": reason}, status=status)


@method_decorator([login_not_required, never_cache], name="dispatch")
class Start(OIDCAuthenticationRequestView):
    def __init__(self, *args, **kwargs) -> None:
        # The library reads its settings in __init__; with SSO off they do not exist.
        self.args, self.kwargs = args, kwargs

    def dispatch(self, request, *args, **kwargs):
        _require_enabled()
        super().__init__()
        return super().dispatch(request, *args, **kwargs)


@method_decorator([login_not_required, never_cache], name="dispatch")
class Callback(OIDCAuthenticationCallbackView):
    def dispatch(self, request, *args, **kwargs):
        _require_enabled()
        try:
            return super().dispatch(request, *args, **kwargs)
        except SuspiciousOperation as exc:
            log.warning("SSO callback refused: %s", exc)
            return failed(
                request,
                "This sign-in does not match one this browser started here (it may have "
                "expired, been used already, or come from another site).",
            )
        except requests.HTTPError as exc:
            log.warning("SSO callback: the identity provider refused: %s", exc)
            return failed(request, "The identity provider refused the sign-in code.")
        except requests.RequestException as exc:
            log.error("SSO callback: the identity provider did not answer: %s", exc)
            return failed(
                request, "The identity provider did not answer; try again shortly.", status=502
            )

    def login_failure(self):
        error = self.request.GET.get("error", "")
        if error:
            detail = safe_text(self.request.GET.get("error_description", "") or error)[:200]
            return failed(self.request, f"The identity provider ended the sign-in: {detail}")
        return failed(
            self.request,
            "The sign-in could not be completed (no sign-in was started in this browser, "
            "or your account there is not allowed here).",
        )
