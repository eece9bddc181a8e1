"""The home page: active investigations first with what leads and where the fix stands,
then recent ones, and a one-step open from a symptom on a deployment."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations import actions
from investigations.models import Deployment, Investigation


@pytest.fixture
def deployment(team):
    return Deployment.objects.create(team=team, name="atlas-prod")


def test_active_investigations_show_the_leading_cause_alarm_and_fix(
    client_for, commander, deployment, django_assert_max_num_queries
):
    suggested = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander, title="TTFT over target"
    )
    Investigation.objects.filter(pk=suggested.pk).update(
        last_suggestions={"kv-cache-pressure": "confirm", "router-latency": "eliminate"},
        alarm_firing=True,
    )
    fixed = actions.open_investigation(
        deployment=deployment, symptom="itl-spikes", user=commander, title="ITL spikes"
    )
    actions.decide(
        investigation=fixed, node="oversized-prefill-chunks", action="confirm",
        reason="8k-token steps in the trace", user=commander, evidence={},
    )  # fmt: skip
    actions.record_fix(
        investigation=fixed,
        node="oversized-prefill-chunks",
        parameters={"max_num_batched_tokens": 512},
        user=commander,
    )
    closed = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=commander, title="OOM last week"
    )
    actions.close_investigation(
        investigation=closed, user=commander, verification_state="pending", override="drill over"
    )
    client = client_for(commander)
    # Session, user, 3 per list (rows, decisions, fixes) x 2, workers 2, deployments +
    # targets, teams: constant in the number of investigations.
    with django_assert_max_num_queries(13):
        page = client.get(reverse("home")).content.decode()
    active = page.split('data-testid="active-investigations"')[1].split("</table>")[0]
    assert "TTFT over target" in active and "ITL spikes" in active
    assert "OOM last week" not in active
    assert 'kv-cache-pressure</code> <span class="muted">(suggested)' in active
    assert 'oversized-prefill-chunks</code> <span class="muted">(confirmed)' in active
    assert "strict-chunk-budget" in active and "firing" in active
    assert "Recently closed" in page and "OOM last week" in page


def test_one_step_open_from_the_home_page(client_for, responder, viewer, outsider, deployment):
    url = reverse("investigations:open_from_home")
    form = {"deployment": str(deployment.pk), "symptom": "gpu-oom"}
    response = client_for(responder).post(url, form)
    investigation = Investigation.objects.get()
    assert response.url == reverse("investigations:detail", args=[investigation.pk])
    assert client_for(viewer).post(url, form).status_code == 403
    assert client_for(outsider).post(url, form).status_code == 404
    assert client_for(responder).post(url, {"deployment": "nope"}).status_code == 404
    assert Investigation.objects.count() == 1
