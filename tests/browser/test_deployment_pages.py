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


def test_a_commander_calibrates_the_budget_from_a_quiet_window(
    page, commander, deployment, requests_seen, live_server
):
    """The one-click calibration: proposals with their source, filled into the form, and
    the budget changed only by Save; readable at a phone's width."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.browser.support import horizontal_overflow
    from tests.support import builders

    engine = builders.target(deployment)
    builders.observations(
        engine,
        {"ttft_p50": 0.045, "itl_p99": 0.040},
        at=timezone.now() - timedelta(seconds=5),
        count=20,
        step_s=30.0,
    )
    log_in(page, commander)
    page.goto(f"/deployments/{deployment.pk}/edit/")
    page.get_by_label("Calibrate from the last").fill("20")
    page.get_by_role("button", name="Calibrate", exact=True).click()
    proposals = page.get_by_test_id("calibration-proposals")
    expect()(proposals).to_contain_text("From the last 20 minutes")
    ttft_row = proposals.locator('tr[data-field="ttft_target_ms"]')
    expect()(ttft_row).to_contain_text("450.0")
    expect()(ttft_row).to_contain_text("ttft_p50")
    expect()(ttft_row).to_contain_text("20 over 570 s")
    expect()(proposals.locator('tr[data-field="prefill_ms_per_token"]')).to_contain_text(
        "No proposal: 0 readings"
    )
    expect()(page.get_by_label("TTFT target (ms)")).to_have_value("450.0")
    deployment.refresh_from_db()
    assert deployment.ttft_target_ms == 600.0  # shown and filled, not saved

    page.set_viewport_size({"width": 390, "height": 844})
    assert horizontal_overflow(page) is None
    page.get_by_role("button", name="Save").click()
    expect()(page.locator("section").filter(has_text="Budget constants")).to_contain_text("450")
    deployment.refresh_from_db()
    assert (deployment.ttft_target_ms, deployment.itl_ceiling_ms) == (450.0, 60.0)
    assert requests_seen.outside(live_server.url) == []
