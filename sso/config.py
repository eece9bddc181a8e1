"""The SSO settings, parsed from the environment without Django (tests check the rules
without reloading settings; ``atlas_console/settings.py`` and the test fixtures build
the same Django settings from ``django_settings``).

The identity provider's endpoints are the operator's configuration, trusted like
``DATABASE_URL``: Atlas's server talks to the token, userinfo and JWKS endpoints directly,
not through the probes' network guard, which exists for URLs that team members type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

ROLES = ("viewer", "responder", "commander")
RANK = {role: rank for rank, role in enumerate(ROLES)}
ENDPOINTS = {
    "ATLAS_OIDC_AUTHORIZATION_ENDPOINT": "OIDC_OP_AUTHORIZATION_ENDPOINT",
    "ATLAS_OIDC_TOKEN_ENDPOINT": "OIDC_OP_TOKEN_ENDPOINT",
    "ATLAS_OIDC_USERINFO_ENDPOINT": "OIDC_OP_USER_ENDPOINT",
    "ATLAS_OIDC_JWKS_ENDPOINT": "OIDC_OP_JWKS_ENDPOINT",
}
SIGN_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
BACKEND = "sso.backend.AtlasOIDCBackend"


class ConfigError(ValueError):
    """A bad SSO variable; settings.py turns it into ImproperlyConfigured."""


@dataclass(frozen=True)
class GroupRole:
    """Members of IdP group ``group`` get ``role`` in the Atlas team named ``team``."""

    team: str
    role: str
    group: str


def parse_group_roles(raw: str, name: str = "ATLAS_OIDC_GROUP_ROLES") -> tuple[GroupRole, ...]:
    """``team:role=group`` items, comma-separated. The last ``=`` and the last ``:`` before
    it split an item, so team names may hold colons and groups may hold ``=``-free paths
    like Keycloak's ``/ops/atlas``; a team name cannot hold a comma."""
    rules: list[GroupRole] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        left, eq, group = item.rpartition("=")
        team, colon, role = left.rpartition(":")
        team, role, group = team.strip(), role.strip().lower(), group.strip()
        if not (eq and colon and team and group):
            raise ConfigError(f"{name} item {item!r} is invalid: expected team:role=group.")
        if role not in RANK:
            raise ConfigError(
                f"{name} item {item!r} is invalid: role must be one of {', '.join(ROLES)}."
            )
        rules.append(GroupRole(team=team, role=role, group=group))
    return tuple(rules)


def roles_for(groups: list[str], rules: tuple[GroupRole, ...]) -> dict[str, str]:
    """Team name -> the highest role any of ``groups`` maps to there (only mapped teams)."""
    held = set(groups)
    wanted: dict[str, str] = {}
    for rule in rules:
        if rule.group in held and RANK[rule.role] > RANK.get(wanted.get(rule.team, ""), -1):
            wanted[rule.team] = rule.role
    return wanted


def groups_from_claim(value: object) -> list[str]:
    """IdPs send the groups claim as a list of strings, or one string (some put a single
    group there, some a space- or comma-separated list); anything else is no groups."""
    if isinstance(value, str):
        return [g for g in re.split(r"[\s,]+", value) if g]
    if isinstance(value, list | tuple):
        return [g for g in value if isinstance(g, str) and g]
    return []


def _endpoint(environ: Mapping[str, str], name: str, *, production: bool) -> str:
    value = environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is required when ATLAS_OIDC_CLIENT_ID is set.")
    allowed = ("https://",) if production else ("https://", "http://")
    if not value.startswith(allowed) or " " in value:
        expected = "an https:// URL" if production else "an http(s):// URL"
        raise ConfigError(f"{name}={value!r} is invalid: expected {expected}.")
    return value


def django_settings(environ: Mapping[str, str], *, production: bool) -> dict[str, object]:
    """The Django settings SSO needs, or ``{"ATLAS_OIDC_ENABLED": False}`` when
    ``ATLAS_OIDC_CLIENT_ID`` is unset (then nothing else is read, so nothing changes)."""
    client_id = environ.get("ATLAS_OIDC_CLIENT_ID", "").strip()
    if not client_id:
        return {"ATLAS_OIDC_ENABLED": False, "ATLAS_OIDC_GROUP_ROLES": ()}
    values: dict[str, object] = {
        setting: _endpoint(environ, name, production=production)
        for name, setting in ENDPOINTS.items()
    }
    algorithm = environ.get("ATLAS_OIDC_SIGN_ALGO", "RS256").strip()
    if algorithm not in SIGN_ALGORITHMS:
        raise ConfigError(
            f"ATLAS_OIDC_SIGN_ALGO={algorithm!r} is invalid: expected one of "
            f"{', '.join(SIGN_ALGORITHMS)}."
        )
    timeout_raw = environ.get("ATLAS_OIDC_TIMEOUT", "10").strip()
    if not timeout_raw.isdigit() or not 1 <= int(timeout_raw) <= 60:
        raise ConfigError(f"ATLAS_OIDC_TIMEOUT={timeout_raw!r} is invalid: expected 1-60.")
    scopes = " ".join(environ.get("ATLAS_OIDC_SCOPES", "openid email profile").split())
    if "openid" not in scopes.split():
        raise ConfigError(f"ATLAS_OIDC_SCOPES={scopes!r} is invalid: it must include openid.")
    values.update(
        {
            "ATLAS_OIDC_ENABLED": True,
            "ATLAS_OIDC_GROUP_ROLES": parse_group_roles(environ.get("ATLAS_OIDC_GROUP_ROLES", "")),
            "ATLAS_OIDC_GROUPS_CLAIM": environ.get("ATLAS_OIDC_GROUPS_CLAIM", "groups").strip()
            or "groups",
            "ATLAS_OIDC_USERNAME_CLAIM": environ.get(
                "ATLAS_OIDC_USERNAME_CLAIM", "preferred_username"
            ).strip()
            or "preferred_username",
            "OIDC_RP_CLIENT_ID": client_id,
            "OIDC_RP_CLIENT_SECRET": environ.get("ATLAS_OIDC_CLIENT_SECRET", ""),
            "OIDC_RP_SIGN_ALGO": algorithm,
            "OIDC_RP_SCOPES": scopes,
            # Authorization code flow with PKCE (S256) and a nonce, always.
            "OIDC_USE_PKCE": True,
            "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
            "OIDC_USE_NONCE": True,
            "OIDC_TIMEOUT": int(timeout_raw),
            "OIDC_AUTHENTICATION_CALLBACK_URL": "sso:callback",
            "OIDC_CREATE_USER": True,
            "OIDC_STORE_ACCESS_TOKEN": False,
            "OIDC_STORE_ID_TOKEN": False,
        }
    )
    return values
