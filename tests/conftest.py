"""The fixed cast every test uses, and the rule for tests that need real services.

Actors: ``commander``, ``responder`` and ``viewer`` are members of ``team``;
``outsider`` commands a different team and must never see ``team``'s rows.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest
from django.conf import settings as django_settings
from hypothesis import settings

from deployments.models import Deployment
from teams.models import Membership, Role, Team
from tests.support import builders

# The product hashes passwords with PBKDF2 at Django's 1,000,000 iterations: about a second
# per user on a busy machine, and most tests create two to four. Tests hash with MD5, as
# Django's testing docs advise; every process that checks a password here is this one
# (live_server), the others are handed a session (force_login).
django_settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Hypothesis' default 200 ms deadline per example is a wall-clock assertion: on a busy
# machine it fails correct code. No test here times itself (timings live in bench/).
settings.register_profile("atlas", deadline=None)
settings.load_profile("atlas")

PASSWORD = "correct horse battery staple"


def require_service(name: str, reason: str) -> None:
    """Skip locally, fail loudly in CI: CI promises every service the suite needs."""
    message = f"{name} unavailable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def frozen_now(time_machine) -> datetime:
    """The wall clock stopped for the whole test, at its start (whole seconds).

    For tests that build data relative to "now" and then ask a view or task, which reads
    the clock again: on a busy machine seconds pass in between (a chart's 2400 s window
    once read 2405.4 s). ``time.monotonic`` is not frozen, so timeouts still work; move
    the clock on explicitly with ``time_machine.shift(seconds)``."""
    instant = datetime.now(UTC).replace(microsecond=0)
    time_machine.move_to(instant, tick=False)
    return instant


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

    Budget fields not given keep the model's defaults (deployments.budget.Budget); the rows
    themselves come from tests/support/builders.py, which scripts and TestCases call."""

    def make(name: str = "atlas-prod", *, team=team, **fields) -> Deployment:
        return builders.deployment(team, name, **fields)

    return make


@pytest.fixture
def deployment(make_deployment):
    """One deployment of ``team`` with the default budget (modules may define their own)."""
    return make_deployment()
