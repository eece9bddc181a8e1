""" "Fill from the engine": a real scrape over real HTTP, polled by the probe, proposes the
budget fields the engine's own report determines; the commander accepts by saving."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEntry
from deployments.budget import kv_capacity_tokens
from deployments.models import Deployment
from deployments.proposals import propose
from probes.models import Target, TargetKind
from probes.parsing.sglang_info import parse_server_info
from probes.tasks import poll_cycle
from tests.support.samples import REAL, samples_absent
from tests.support.static_http import serve

pytestmark = pytest.mark.django_db

CAPTURE = (
    Path(__file__).resolve().parents[1]
    / "realengine"
    / "captures"
    / "vllm-0.32-cpu-kv-pressure.metrics.txt"
)
SERVER_INFO = REAL / "server_info" / "sglang_docsci_2026-03_get_server_info_qwen05b.json"
# The tiny Llama's KV per token: 2 layers x 2 KV heads x 64 dims x (K, V) x 2 bytes.
TINY_KV_BYTES = 2 * 2 * 64 * 2 * 2


def _poll(deployment: Deployment, kind: str, url: str) -> None:
    Target.objects.create(deployment=deployment, kind=kind, url=url)
    assert poll_cycle(deployment.pk, timezone.now()) == 1


def _form_data(deployment: Deployment, **changes) -> dict:
    data = {
        "name": deployment.name,
        "engine": deployment.engine,
        "model_name": deployment.model_name,
        "poll_interval_s": deployment.poll_interval_s,
        **dataclasses.asdict(deployment.budget),
    }
    return {**data, **changes}


def test_a_real_vllm_scrape_proposes_the_kv_budget_and_the_served_model(
    make_deployment, client_for, commander
):
    deployment = make_deployment("tiny", kv_bytes_per_token=TINY_KV_BYTES, tp_size=1)
    with serve({"/metrics": CAPTURE.read_bytes()}) as base:
        _poll(deployment, TargetKind.ENGINE, f"{base}/metrics")
    page = client_for(commander).get(
        reverse("deployments:edit", args=[deployment.pk]), {"fill": "engine"}
    )
    assert page.status_code == 200
    body = page.content.decode()
    assert 'data-testid="engine-proposals"' in body
    assert "12,288 KV tokens (96 blocks x 128)" in body
    form = page.context["form"]
    proposed_gib = form.initial["kv_budget_gib_per_rank"]
    assert form.initial["model_name"] == "tiny-llama"
    assert f'value="{proposed_gib}"' in body  # filled into the form, not saved
    deployment.refresh_from_db()
    assert deployment.model_name == ""
    assert kv_capacity_tokens(deployment.budget) != 96 * 128

    # Accepting is saving the filled form: the budget's capacity is now the engine's.
    saved = client_for(commander).post(
        reverse("deployments:edit", args=[deployment.pk]),
        _form_data(deployment, kv_budget_gib_per_rank=proposed_gib, model_name="tiny-llama"),
    )
    assert saved.status_code == 302
    deployment.refresh_from_db()
    assert kv_capacity_tokens(deployment.budget) == 96 * 128
    entry = AuditEntry.objects.get(action="deployment.update")
    assert set(entry.data["changed"]) == {"kv_budget_gib_per_rank", "model_name"}


@pytest.mark.skipif(samples_absent(REAL), reason="shared samples not mounted")
def test_a_real_sglang_server_info_proposes_chunk_seats_tp_and_capacity(
    make_deployment, client_for, commander
):
    payload = SERVER_INFO.read_bytes()
    info = parse_server_info(payload)
    deployment = make_deployment("qwen", engine="sglang")
    with serve({"/server_info": payload}, content_type="application/json") as base:
        _poll(deployment, TargetKind.SGLANG_INFO, f"{base}/server_info")
    page = client_for(commander).get(
        reverse("deployments:edit", args=[deployment.pk]), {"fill": "engine"}
    )
    initial = page.context["form"].initial
    assert initial["max_num_batched_tokens"] == info.arg("chunked_prefill_size")
    assert initial["max_num_seqs"] == (
        info.effective_max_running_requests or info.arg("max_running_requests")
    )
    assert initial["tp_size"] == info.arg("tp_size")
    assert initial["model_name"] == info.arg("served_model_name")
    budget = dataclasses.replace(
        deployment.budget, kv_budget_gib_per_rank=initial["kv_budget_gib_per_rank"]
    )
    assert kv_capacity_tokens(budget) == info.arg("max_total_num_tokens")


def test_with_nothing_polled_nothing_is_proposed_and_the_page_says_so(
    deployment, client_for, commander
):
    page = client_for(commander).get(
        reverse("deployments:edit", args=[deployment.pk]), {"fill": "engine"}
    )
    assert page.status_code == 200
    assert "reported nothing a budget field holds" in page.content.decode()
    assert page.context["filled"]["proposals"] == []


def test_a_responder_cannot_fill_a_deployment(deployment, client_for, responder):
    page = client_for(responder).get(
        reverse("deployments:edit", args=[deployment.pk]), {"fill": "engine"}
    )
    assert page.status_code in (403, 404)


@pytest.mark.parametrize(
    "report",
    [
        {"kv_capacity_tokens": -5, "tp_size": 0, "max_running_requests": 2.5},
        {"kv_capacity_tokens": "lots", "served_model": "   ", "chunked_prefill_size": -1},
        {"kv_capacity_tokens": float("nan"), "tp_size": True},
    ],
)
def test_odd_reported_values_propose_nothing(deployment, report):
    assert propose(deployment, report) == []
