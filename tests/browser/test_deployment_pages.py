"""A commander registers a deployment and edits its budget in real headless Chromium,
from the home page's link through the deployment page, a refused value included."""

from __future__ import annotations

import pytest

from deployments.models import Deployment
from tests.browser.support import expect, log_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_commander_creates_a_deployment_and_edits_its_budget(
    page, commander, team, requests_seen, live_server
):
    log_in(page, commander)
    page.get_by_role("link", name="Register a deployment").click()
    expect()(page.get_by_role("heading", name="New deployment")).to_be_visible()
    page.get_by_label("Team", exact=True).select_option(label=team.name)
    page.get_by_label("Name", exact=True).fill("atlas-canary")
    page.get_by_label("Engine").select_option(label="SGLang")
    page.get_by_label("Tensor-parallel degree").fill("8")
    page.get_by_role("button", name="Create deployment").click()

    expect()(page.get_by_role("heading", name="atlas-canary")).to_be_visible()
    expect()(page.get_by_test_id("polling")).to_contain_text("idle")
    deployment = Deployment.objects.get(name="atlas-canary")
    assert (deployment.team, deployment.engine, deployment.tp_size) == (team, "sglang", 8)

    page.get_by_role("link", name="Edit deployment and budget").click()
    kv_budget = page.get_by_label("KV budget per rank (GiB)")
    expect()(kv_budget).to_have_value("35.0")
    page.get_by_label("Decode step (ms)").fill("40")
    page.get_by_label("Queue baseline, high").fill("1")  # below the low baseline: refused
    page.get_by_role("button", name="Save").click()
    expect()(page.locator(".errorlist")).to_contain_text("below the low one")
    deployment.refresh_from_db()
    assert deployment.decode_step_ms == 45.0

    page.get_by_label("Queue baseline, high").fill("8")

    page.get_by_label("Decode step (ms)").fill("40")
    page.get_by_label("KV budget per rank (GiB)").fill("30")
    page.get_by_role("button", name="Save").click()
    budget = page.locator("section").filter(has_text="Budget constants")
    expect()(budget).to_contain_text("30.0 GiB")
    expect()(budget).to_contain_text("40.0 ms")
    deployment.refresh_from_db()
    assert (deployment.kv_budget_gib_per_rank, deployment.decode_step_ms) == (30.0, 40.0)
    assert requests_seen.outside(live_server.url) == []
