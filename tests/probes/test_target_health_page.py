"""Every probe run is visible to the team, and only to the team."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.support import builders


@pytest.fixture
def deployment(make_deployment):
    deployment = make_deployment(model_name="atlas-70b")
    builders.target(
        deployment,
        url="http://127.0.0.1:8100/metrics",
        last_polled_at=timezone.now(),
        last_error_at=timezone.now(),
        last_error="timeout: no answer in time",
        last_error_kind="timeout",
        last_error_transient=True,
        consecutive_failures=3,
        last_latency_ms=8000.0,
    )
    return deployment


@pytest.mark.parametrize("name", ["investigations:deployment", "investigations:deployment_targets"])
def test_members_see_each_targets_last_error(client_for, viewer, deployment, name):
    page = client_for(viewer).get(reverse(name, args=[deployment.id])).content.decode()
    assert "failing 3x in a row" in page and "(transient)" in page
    assert "timeout: no answer in time" in page
    assert "8000.0 ms" in page


@pytest.mark.parametrize("name", ["investigations:deployment", "investigations:deployment_targets"])
def test_outsiders_get_404(client_for, outsider, deployment, name):
    assert client_for(outsider).get(reverse(name, args=[deployment.id])).status_code == 404


def test_home_lists_the_teams_deployments_only(client_for, commander, outsider, deployment):
    assert "atlas-prod" in client_for(commander).get(reverse("home")).content.decode()
    assert "atlas-prod" not in client_for(outsider).get(reverse("home")).content.decode()


def test_the_deployment_page_shows_the_budget_arithmetic(client_for, viewer, deployment):
    page = (
        client_for(viewer)
        .get(reverse("investigations:deployment", args=[deployment.id]))
        .content.decode()
    )
    assert "114688 tokens" in page and "62.9 ms" in page
