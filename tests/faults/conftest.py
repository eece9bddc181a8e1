"""Fault tests: real servers of their own (tests/support/services.py), real product
processes, real outages. Everything here carries the ``faults`` marker."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support.services import private_postgres, private_redis  # noqa: F401 (fixtures)


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/faults/" in str(item.path):
            item.add_marker(pytest.mark.faults)


def session_cookie(user) -> str:
    """A real login session stored in the database, as a Cookie header value."""
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"
