"""The home page: active investigations first with what leads and where the fix stands,
then recent ones, and a one-step open from a symptom on a deployment."""

from __future__ import annotations

from django.urls import reverse

from deployments.models import Deployment
from investigations import actions
from investigations.models import Investigation
from tests.support import builders


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
    actions.close_investigation(investigation=closed, user=commander, override="drill over")
    client = client_for(commander)
    # Session, user, 3 per list (rows, decisions, fixes) x 2, workers 2, deployments +
    # targets, teams, the reader's pending invitations: constant in the number of
    # investigations.
    with django_assert_max_num_queries(14):
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


def test_each_fix_shows_its_verification_as_the_last_poll_cycle_evaluated_it(
    client_for, commander, team, django_assert_max_num_queries, frozen_now
):
    from datetime import timedelta

    from investigations.cycle import evaluate_after_poll
    from investigations.models import FixRecord
    from probes.models import Observation

    now = frozen_now
    calm = {"ttft_p95": 0.35, "kv_cache_usage": 0.7, "preemptions_rate": 0.0, "requests_waiting": 3}
    fixed = {}
    for name, values in (("calm", calm), ("still-full", {**calm, "kv_cache_usage": 0.95})):
        deployment = builders.deployment(team, name)
        engine = builders.target(deployment)
        # The incident (TTFT over target) until the fix 25 minutes ago, then its values: a
        # recovery that came before the fix would not be the fix's (verification).
        Observation.objects.bulk_create(
            Observation(
                target=engine,
                taken_at=now - timedelta(seconds=15 * n),
                signal=s,
                value=1.4 if s == "ttft_p95" and n > 100 else v,
            )
            for n in range(120)
            for s, v in values.items()
        )
        investigation = actions.open_investigation(
            deployment=deployment, symptom="high-ttft", user=commander, title=f"TTFT on {name}"
        )
        actions.decide(
            investigation=investigation, node="kv-cache-pressure", action="confirm",
            reason="KV full", user=commander, evidence={},
        )  # fmt: skip
        actions.record_fix(
            investigation=investigation, node="kv-cache-pressure", parameters={}, user=commander
        )
        FixRecord.objects.filter(investigation=investigation).update(
            applied_at=now - timedelta(minutes=25)
        )
        evaluate_after_poll(deployment.pk, now)
        fixed[name] = investigation
    # A newer fix nobody's poll cycle has evaluated yet is pending, not the old fix's state.
    renewed = actions.open_investigation(
        deployment=Deployment.objects.get(name="calm"), symptom="high-ttft", user=commander,
        title="TTFT again",
    )  # fmt: skip
    Investigation.objects.filter(pk=renewed.pk).update(
        last_suggestions=Investigation.objects.get(pk=fixed["calm"].pk).last_suggestions
    )
    actions.decide(
        investigation=renewed, node="kv-cache-pressure", action="confirm", reason="again",
        user=commander, evidence={},
    )  # fmt: skip
    actions.record_fix(
        investigation=renewed, node="kv-cache-pressure", parameters={}, user=commander
    )
    client = client_for(commander)
    with django_assert_max_num_queries(14):  # still no evaluation per row
        page = client.get(reverse("home")).content.decode()
    rows = page.split('data-testid="active-investigations"')[1].split("</table>")[0].split("<tr>")

    def row(title):
        (found,) = [r for r in rows if title in r]
        return found.split('data-testid="verification">')[1].split("</span>")[0]

    assert row("TTFT on calm") == "verification passing"
    assert row("TTFT on still-full") == "verification failing"
    assert row("TTFT again") == "verification pending"
