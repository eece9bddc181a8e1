"""The backend's own checks on top of mozilla-django-oidc: the audience (the library skips
it) and that only the SSO callback ever reaches the token endpoint."""

from __future__ import annotations

import pytest
from django.core.exceptions import SuspiciousOperation
from django.test import RequestFactory
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from sso.backend import AtlasOIDCBackend
from tests.support.oidc_provider import enable

UNREACHABLE = "http://127.0.0.1:9"  # discard port: nothing may be called in these tests


@pytest.fixture
def backend(settings) -> AtlasOIDCBackend:
    enable(
        settings,
        {
            "ATLAS_OIDC_CLIENT_ID": "atlas",
            "ATLAS_OIDC_AUTHORIZATION_ENDPOINT": UNREACHABLE + "/authorize",
            "ATLAS_OIDC_TOKEN_ENDPOINT": UNREACHABLE + "/token",
            "ATLAS_OIDC_USERINFO_ENDPOINT": UNREACHABLE + "/userinfo",
            "ATLAS_OIDC_JWKS_ENDPOINT": UNREACHABLE + "/jwks",
        },
    )
    return AtlasOIDCBackend()


@pytest.mark.parametrize(
    "payload",
    [
        {"aud": "another-client", "iss": "https://idp", "sub": "1"},
        {"aud": ["another-client"], "iss": "https://idp", "sub": "1"},
        {"aud": "atlas", "iss": "https://idp"},
    ],
)
def test_an_id_token_for_another_client_or_without_sub_is_refused(backend, monkeypatch, payload):
    monkeypatch.setattr(OIDCAuthenticationBackend, "verify_token", lambda self, t, **k: payload)
    with pytest.raises(SuspiciousOperation):
        backend.verify_token("signed-token", nonce="n")


def test_an_id_token_for_this_client_passes(backend, monkeypatch):
    payload = {"aud": ["atlas", "other"], "iss": "https://idp", "sub": "1"}
    monkeypatch.setattr(OIDCAuthenticationBackend, "verify_token", lambda self, t, **k: payload)
    assert backend.verify_token("signed-token", nonce="n") == payload


def test_a_password_login_never_reaches_the_token_endpoint(backend, monkeypatch):
    """A local login POST whose query string carries code and state is still a password
    login: only the callback (which passes a nonce) may redeem a code."""

    def refuse(*args, **kwargs):
        raise AssertionError("the token endpoint was called")

    monkeypatch.setattr(AtlasOIDCBackend, "get_token", refuse)
    request = RequestFactory().post("/accounts/login/?code=c&state=s")
    assert backend.authenticate(request, username="cora", password="pw") is None
