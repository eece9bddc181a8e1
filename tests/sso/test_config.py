"""The SSO variables: off unless the client id is set, and a bad value stops start-up
naming the variable (as every other setting does)."""

from __future__ import annotations

import pytest

from sso import config

ENDPOINTS = {
    "ATLAS_OIDC_AUTHORIZATION_ENDPOINT": "https://idp.example/authorize",
    "ATLAS_OIDC_TOKEN_ENDPOINT": "https://idp.example/token",
    "ATLAS_OIDC_USERINFO_ENDPOINT": "https://idp.example/userinfo",
    "ATLAS_OIDC_JWKS_ENDPOINT": "https://idp.example/jwks",
}


def test_without_a_client_id_nothing_is_read_and_sso_is_off():
    assert config.django_settings({"ATLAS_OIDC_GROUP_ROLES": "garbage"}, production=True) == {
        "ATLAS_OIDC_ENABLED": False,
        "ATLAS_OIDC_GROUP_ROLES": (),
    }


def test_with_a_client_id_pkce_and_nonce_are_always_on():
    values = config.django_settings({"ATLAS_OIDC_CLIENT_ID": "atlas", **ENDPOINTS}, production=True)
    assert values["ATLAS_OIDC_ENABLED"] is True
    assert values["OIDC_USE_PKCE"] is True
    assert values["OIDC_PKCE_CODE_CHALLENGE_METHOD"] == "S256"
    assert values["OIDC_USE_NONCE"] is True
    assert values["OIDC_RP_SIGN_ALGO"] == "RS256"
    assert values["OIDC_TIMEOUT"] == 10
    assert values["OIDC_OP_TOKEN_ENDPOINT"] == "https://idp.example/token"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"ATLAS_OIDC_TOKEN_ENDPOINT": ""}, "ATLAS_OIDC_TOKEN_ENDPOINT is required"),
        ({"ATLAS_OIDC_JWKS_ENDPOINT": "http://idp.example/jwks"}, "ATLAS_OIDC_JWKS_ENDPOINT="),
        ({"ATLAS_OIDC_SIGN_ALGO": "HS256"}, "ATLAS_OIDC_SIGN_ALGO="),
        ({"ATLAS_OIDC_SCOPES": "email"}, "ATLAS_OIDC_SCOPES="),
        ({"ATLAS_OIDC_TIMEOUT": "0"}, "ATLAS_OIDC_TIMEOUT="),
        ({"ATLAS_OIDC_GROUP_ROLES": "ops=admins"}, "ATLAS_OIDC_GROUP_ROLES item 'ops=admins'"),
        ({"ATLAS_OIDC_GROUP_ROLES": "ops:owner=admins"}, "role must be one of"),
    ],
)
def test_a_bad_value_names_its_variable(change, named):
    """Production refuses plain http endpoints: the token and JWKS answers decide who
    signs in, so they must not travel in the clear."""
    with pytest.raises(config.ConfigError, match=named):
        config.django_settings(
            {"ATLAS_OIDC_CLIENT_ID": "atlas", **ENDPOINTS, **change}, production=True
        )


def test_group_roles_parse_and_the_highest_role_wins():
    rules = config.parse_group_roles(
        "On call: EU:viewer=/ops/all, On call: EU:commander=/ops/leads,,Infra:responder=infra"
    )
    assert rules[0] == config.GroupRole("On call: EU", "viewer", "/ops/all")
    assert config.roles_for(["/ops/all", "/ops/leads"], rules) == {"On call: EU": "commander"}
    assert config.roles_for(["infra"], rules) == {"Infra": "responder"}
    assert config.roles_for(["nobody"], rules) == {}


@pytest.mark.parametrize(
    ("claim", "groups"),
    [(["a", "b", 3], ["a", "b"]), ("a b,c", ["a", "b", "c"]), (None, []), ({"a": 1}, [])],
)
def test_the_groups_claim_in_the_shapes_idps_send(claim, groups):
    assert config.groups_from_claim(claim) == groups
