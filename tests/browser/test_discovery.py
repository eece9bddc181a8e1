"""A team adopts Atlas from what it already runs, in real headless Chromium: a commander
creates a deployment from a running engine (the simulator's vLLM endpoints), then registers
the targets a real Prometheus (Debian's) scraping it lists, and the registered targets poll."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from django.utils import timezone

from deployments.budget import kv_capacity_tokens
from deployments.models import Deployment
from probes.models import Poll, TargetKind
from probes.tasks import poll_cycle
from tests.browser.support import expect, log_in
from tests.support.prometheus import prometheus, wait_for_series

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

JOBS = (("engine", "/metrics"), ("dcgm", "/dcgm/metrics"), ("router", "/router/metrics"))


def _poll_in_a_thread(deployment_id) -> int:
    """The probes fetch with ``asyncio.run``, which cannot run where Playwright's loop is."""

    def run() -> int:
        try:
            return poll_cycle(deployment_id, timezone.now().replace(microsecond=0))
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


def test_a_commander_creates_a_deployment_from_its_engine_and_targets_from_prometheus(
    page, commander, team, simulator, tmp_path, requests_seen, live_server
):
    base = simulator.base
    host = base.removeprefix("http://")
    with prometheus(tmp_path, host, JOBS) as prom:
        for name in ("vllm:num_requests_running", "DCGM_FI_DEV_GPU_UTIL"):
            wait_for_series(prom, name)
        wait_for_series(prom, "router_forward_duration_seconds_count")

        log_in(page, commander)
        page.get_by_role("link", name="Register a deployment").click()
        page.get_by_role("link", name="Read it from a running engine").click()
        expect()(page.get_by_role("heading", name="New deployment from an engine")).to_be_visible()
        page.get_by_label("Engine URLs (one per replica)").fill(base)
        page.get_by_role("button", name="Read the engine").click()

        # Each proposed value says where it came from.
        proposals = page.get_by_test_id("engine-proposals")
        expect()(proposals).to_contain_text(
            f"from vllm:cache_config_info kv_cache_size_tokens on {base}/metrics"
        )
        expect()(proposals).to_contain_text(f"from /v1/models id on {base}/v1/models")
        expect()(page.get_by_test_id("engine-report")).to_contain_text("max_model_len")
        expect()(page.get_by_test_id("not-reported")).to_contain_text("TTFT target (ms)")
        expect()(page.get_by_label("Model name")).to_have_value("atlas-70b")
        kv = page.get_by_label("KV budget per rank (GiB)").input_value()

        page.get_by_label("Team", exact=True).select_option(label=team.name)
        page.get_by_label("Name", exact=True).fill("atlas-canary")
        page.get_by_label("TTFT target (ms)").fill("900")  # the commander's, not the engine's
        page.get_by_role("button", name="Create deployment").click()

        expect()(page.get_by_role("heading", name="atlas-canary")).to_be_visible()
        deployment = Deployment.objects.get(name="atlas-canary")
        engine = simulator.server.d.replicas[0].engine
        assert kv_capacity_tokens(deployment.budget) == (
            engine.sched.total_blocks * engine.cfg.block_size
        )
        assert (deployment.kv_budget_gib_per_rank, deployment.ttft_target_ms) == (float(kv), 900)
        assert list(deployment.targets.values_list("kind", "url")) == [
            (TargetKind.ENGINE, f"{base}/metrics")
        ]

        page.get_by_role("link", name="Discover targets from Prometheus").click()
        page.get_by_label("Prometheus URL").fill(prom)
        page.get_by_label("Label selector").fill('job=~"engine|dcgm|router"')
        page.get_by_role("button", name="Discover").click()
        found = page.get_by_test_id("discovered")
        # The engine Prometheus scrapes is the one just registered from its URL.
        expect()(found.get_by_test_id("found-engine")).to_contain_text("registered")
        expect()(found.get_by_test_id("found-dcgm")).to_contain_text("new")
        expect()(found.get_by_test_id("found-router")).to_contain_text(f"{base}/router/metrics")
        page.get_by_role("button", name="Register the chosen").click()

        expect()(page.get_by_role("heading", name="atlas-canary")).to_be_visible()
        expect()(page.locator(".messages")).to_contain_text(re.compile(r"Registered 2 targets"))
        assert sorted(deployment.targets.values_list("kind", "url")) == [
            (TargetKind.DCGM, f"{base}/dcgm/metrics"),
            (TargetKind.ENGINE, f"{base}/metrics"),
            (TargetKind.PROMETHEUS, prom),
        ]
        # Re-discovery: everything found is registered now.
        page.get_by_role("link", name="Discover targets from Prometheus").click()
        page.get_by_label("Prometheus URL").fill(prom)
        page.get_by_role("button", name="Discover").click()
        expect()(page.get_by_test_id("discovered")).to_contain_text(
            "Everything found is registered"
        )

        # What was registered is what the probes poll: every target answers.
        assert _poll_in_a_thread(deployment.pk) == 3
        assert set(
            Poll.objects.filter(target__deployment=deployment).values_list("ok", flat=True)
        ) == {True}
    assert requests_seen.outside(live_server.url) == []
