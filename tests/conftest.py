"""The fixed cast every test uses, and the rule for tests that need real services.

Actors: ``commander``, ``responder`` and ``viewer`` are members of ``team``;
``outsider`` commands a different team and must never see ``team``'s rows.
"""

from __future__ import annotations

import os

import pytest

from teams.models import Membership, Role, Team

PASSWORD = "correct horse battery staple"


def require_service(name: str, reason: str) -> None:
    """Skip locally, fail loudly in CI: CI promises every service the suite needs."""
    message = f"{name} unavailable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def _user(django_user_model, username: str):
    return django_user_model.objects.create_user(username=username, password=PASSWORD)


@pytest.fixture
def team(db) -> Team:
    return Team.objects.create(name="Atlas serving")


@pytest.fixture
def other_team(db) -> Team:
    return Team.objects.create(name="Another org")


@pytest.fixture
def commander(django_user_model, team):
    user = _user(django_user_model, "cora-commander")
    Membership.objects.create(team=team, user=user, role=Role.COMMANDER)
    return user


@pytest.fixture
def responder(django_user_model, team):
    user = _user(django_user_model, "remi-responder")
    Membership.objects.create(team=team, user=user, role=Role.RESPONDER)
    return user


@pytest.fixture
def viewer(django_user_model, team):
    user = _user(django_user_model, "vic-viewer")
    Membership.objects.create(team=team, user=user, role=Role.VIEWER)
    return user


@pytest.fixture
def outsider(django_user_model, other_team):
    user = _user(django_user_model, "olga-outsider")
    Membership.objects.create(team=other_team, user=user, role=Role.COMMANDER)
    return user


@pytest.fixture
def client_for(client):
    """Log a client in as one of the cast: ``client_for(viewer)``."""

    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def make_deployment(team):
    """Build a deployment of ``team`` (or another): ``make_deployment("atlas-prod", tp_size=8)``.

    Budget fields not given keep the model's defaults (deployments.budget.Budget)."""
    from deployments.models import Deployment

    def make(name: str = "atlas-prod", *, team=team, **fields) -> Deployment:
        return Deployment.objects.create(team=team, name=name, **fields)

    return make


@pytest.fixture
def deployment(make_deployment):
    """One deployment of ``team`` with the default budget (modules may define their own)."""
    return make_deployment()
