"""Opening an investigation from a symptom and reading its evaluated tree in the browser."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations.models import Investigation
from probes.models import Target, TargetKind
from tests.support import builders


def _open(client, deployment, symptom="high-ttft"):
    return client.post(reverse("investigations:open", args=[deployment.id]), {"symptom": symptom})


def test_a_responder_opens_an_investigation_and_prometheus_gets_the_queries(
    client_for, responder, deployment
):
    prometheus = Target.objects.create(
        deployment=deployment, kind=TargetKind.PROMETHEUS, url="http://10.0.0.9:9090",
        queries={"mine": "up"},
    )  # fmt: skip
    response = _open(client_for(responder), deployment)
    investigation = Investigation.objects.get()
    assert response["Location"] == reverse("investigations:detail", args=[investigation.id])
    assert investigation.opened_by == responder and investigation.symptom == "high-ttft"
    prometheus.refresh_from_db()
    assert "mine" in prometheus.queries
    assert prometheus.queries["router_forward_p95"].startswith("histogram_quantile(0.95")


@pytest.mark.parametrize(("actor", "status"), [("viewer", 403), ("outsider", 404)])
def test_viewers_and_outsiders_cannot_open(client_for, request, deployment, actor, status):
    assert _open(client_for(request.getfixturevalue(actor)), deployment).status_code == status
    assert not Investigation.objects.exists()


def test_an_unknown_symptom_is_refused(client_for, commander, deployment):
    response = _open(client_for(commander), deployment, symptom="<script>")
    assert response.status_code == 302
    assert not Investigation.objects.exists()


def test_the_page_shows_the_tree_evaluated_from_stored_observations(
    client_for, commander, viewer, outsider, deployment, frozen_now
):
    engine = builders.target(deployment)
    values = {
        "ttft_p95": 1.4, "requests_waiting": 47, "requests_running": 40,
        "kv_cache_usage": 0.94, "preemptions_rate": 0.08,
    }  # fmt: skip
    builders.observations(engine, values, at=frozen_now, count=10)
    _open(client_for(commander), deployment)
    investigation = Investigation.objects.get()
    page = client_for(viewer).get(reverse("investigations:detail", args=[investigation.id]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "firing" in html
    ranking = html[html.index('class="ranking"') :]
    assert ranking.index("kv-cache-pressure") < ranking.index("router-latency")
    assert "suggests confirm" in html
    partial = client_for(viewer).get(reverse("investigations:tree", args=[investigation.id]))
    assert partial.status_code == 200 and "<html" not in partial.content.decode()
    other = client_for(outsider).get(reverse("investigations:detail", args=[investigation.id]))
    assert other.status_code == 404
