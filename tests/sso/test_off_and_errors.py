"""SSO off changes nothing; on, the callback answers every bad request with a page (never
a 500), tried against the real test IdP where the IdP's own answer is what matters."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.support.oidc_provider import enable
from tests.support.services import free_port


@pytest.mark.django_db
def test_off_by_default_no_button_and_the_endpoints_are_404(client):
    page = client.get(reverse("login"))
    assert b"Sign in with SSO" not in page.content
    assert client.get(reverse("sso:start")).status_code == 404
    assert client.get(reverse("sso:callback"), {"code": "x", "state": "y"}).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_on_the_login_page_offers_sso_beside_the_local_form(client, sso_on):
    page = client.get(reverse("login") + "?next=/teams/")
    assert b'name="password"' in page.content  # break-glass form stays
    assert b'href="/sso/start/?next=/teams/"' in page.content
    assert b"<script" not in page.content.split(b"<main")[-1]  # no inline script added


@pytest.mark.django_db(transaction=True)
def test_start_redirects_to_the_idp_with_pkce_state_and_nonce(client, sso_on):
    response = client.get(reverse("sso:start"))
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith(sso_on.base + "/o/authorize/?")
    for part in ("code_challenge=", "code_challenge_method=S256", "state=", "nonce="):
        assert part in location


@pytest.mark.django_db(transaction=True)
def test_callback_with_a_state_never_issued_is_a_400_page(client, sso_on):
    client.get(reverse("sso:start"))  # a real state in the session, not this one
    response = client.get(reverse("sso:callback"), {"code": "abc", "state": "forged"})
    assert response.status_code == 400
    assert b"does not match one this browser started" in response.content


@pytest.mark.django_db(transaction=True)
def test_callback_without_any_started_sign_in_is_a_400_page(client, sso_on):
    response = client.get(reverse("sso:callback"), {"code": "abc", "state": "nothing"})
    assert response.status_code == 400
    assert b"could not be completed" in response.content


@pytest.mark.django_db(transaction=True)
def test_a_code_the_idp_refuses_is_a_400_page(client, sso_on):
    """The real IdP's token endpoint answers invalid_grant for a made-up code."""
    start = client.get(reverse("sso:start"))
    state = start["Location"].split("state=")[1].split("&")[0]
    response = client.get(reverse("sso:callback"), {"code": "made-up", "state": state})
    assert response.status_code == 400
    assert b"refused the sign-in code" in response.content
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db(transaction=True)
def test_an_error_from_the_idp_is_shown(client, sso_on):
    start = client.get(reverse("sso:start"))
    state = start["Location"].split("state=")[1].split("&")[0]
    response = client.get(
        reverse("sso:callback"),
        {"error": "access_denied", "error_description": "The user denied", "state": state},
    )
    assert response.status_code == 400
    assert b"The user denied" in response.content


@pytest.mark.django_db
def test_an_unreachable_idp_is_a_502_page(client, settings):
    closed = f"http://127.0.0.1:{free_port()}"
    enable(
        settings,
        {
            "ATLAS_OIDC_CLIENT_ID": "atlas",
            "ATLAS_OIDC_AUTHORIZATION_ENDPOINT": closed + "/authorize",
            "ATLAS_OIDC_TOKEN_ENDPOINT": closed + "/token",
            "ATLAS_OIDC_USERINFO_ENDPOINT": closed + "/userinfo",
            "ATLAS_OIDC_JWKS_ENDPOINT": closed + "/jwks",
        },
    )
    start = client.get(reverse("sso:start"))
    state = start["Location"].split("state=")[1].split("&")[0]
    response = client.get(reverse("sso:callback"), {"code": "c", "state": state})
    assert response.status_code == 502
    assert b"did not answer" in response.content


@pytest.mark.django_db(transaction=True)
def test_the_local_login_keeps_its_lockout_with_sso_on(client, sso_on, commander, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post(reverse("login"), {"username": commander.username, "password": "wrong"})
    locked = client.post(reverse("login"), {"username": commander.username, "password": "x"})
    assert locked.status_code == 429
