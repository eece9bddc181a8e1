"""A real OpenID Connect provider (tests/sso/idp, django-oauth-toolkit) on a free
127.0.0.1 port, registered with the live server's callback, and the settings that turn
Atlas's SSO on against it (built by the same ``sso.config.django_settings`` as production).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sso import config
from tests.support.processes import spawn_logged
from tests.support.services import ROOT, _stop, free_port, http_get, wait_until

CLIENT_ID = "atlas-console"
CLIENT_SECRET = "test-secret-" + "s" * 30
PASSWORD = "idp-password-1"
TEAM = "SSO team"
GROUP_ROLES = (
    f"{TEAM}:commander=atlas-leads,{TEAM}:responder=atlas-oncall,{TEAM}:viewer=atlas-readers"
)
# IdP users: username -> groups at the start of the module.
USERS = {
    "alice": ["atlas-leads", "staff"],
    "bob": ["marketing"],
    "carol": ["atlas-oncall"],
    "cora-commander": ["atlas-readers"],  # the local commander fixture's name (tests/conftest.py)
}


@dataclass
class Idp:
    base: str
    db: Path
    log: Path

    def env(self) -> dict[str, str]:
        return {
            "ATLAS_OIDC_CLIENT_ID": CLIENT_ID,
            "ATLAS_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "ATLAS_OIDC_AUTHORIZATION_ENDPOINT": f"{self.base}/o/authorize/",
            "ATLAS_OIDC_TOKEN_ENDPOINT": f"{self.base}/o/token/",
            "ATLAS_OIDC_USERINFO_ENDPOINT": f"{self.base}/o/userinfo/",
            "ATLAS_OIDC_JWKS_ENDPOINT": f"{self.base}/o/.well-known/jwks.json",
            "ATLAS_OIDC_SCOPES": "openid email profile groups",
            "ATLAS_OIDC_GROUP_ROLES": GROUP_ROLES,
        }

    def set_groups(self, username: str, *groups: str) -> None:
        """A role change made at the IdP (its admin edits the user's groups)."""
        subprocess.run(
            [sys.executable, "-m", "tests.sso.idp.serve", "set-groups", username, *groups],
            cwd=ROOT,
            env={**os.environ, "IDP_DB": str(self.db)},
            check=True,
            timeout=60,
        )


@pytest.fixture(scope="module")
def idp(live_server, tmp_path_factory) -> Iterator[Idp]:
    folder = tmp_path_factory.mktemp("idp")
    port = free_port()
    seed = {
        "client": {
            "id": CLIENT_ID,
            "secret": CLIENT_SECRET,
            "redirect_uri": f"{live_server.url}/sso/callback/",
        },
        "users": [
            {"username": name, "email": f"{name}@example.test", "password": PASSWORD, "groups": g}
            for name, g in USERS.items()
        ],
    }
    server = Idp(base=f"http://127.0.0.1:{port}", db=folder / "idp.sqlite3", log=folder / "log")
    process = spawn_logged(
        [sys.executable, "-m", "tests.sso.idp.serve", "serve", str(port), json.dumps(seed)],
        server.log,
        cwd=ROOT,
        env={**os.environ, "IDP_DB": str(server.db)},
    )
    try:
        ready = wait_until(
            lambda: http_get(f"{server.base}/o/.well-known/jwks.json")[0] == 200, timeout=60
        )
        assert ready, server.log.read_text()[-3000:]
        yield server
    finally:
        _stop(process)


def enable(settings, environ: dict[str, str]) -> None:
    """Turn SSO on for one test exactly as settings.py would for this environment."""
    for name, value in config.django_settings(environ, production=False).items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, config.BACKEND]


@pytest.fixture
def sso_on(settings, idp) -> Idp:
    enable(settings, idp.env())
    return idp
