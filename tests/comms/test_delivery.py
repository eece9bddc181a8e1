"""Status updates: recorded on the investigation and its timeline, sent to each of the
team's chat webhooks over real HTTP on 127.0.0.1 (through the probes' network guard),
once per (update, webhook), with failures on the team page and never in the way."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEntry
from comms import actions
from comms.delivery import send_delivery
from comms.models import ChatKind, ChatWebhook, Delivery, DeliveryState, StatusUpdate
from investigations import actions as investigation_actions
from investigations.actions import InvestigationClosed
from investigations.choices import EventKind
from investigations.models import Investigation, TimelineEvent
from postmortems.record import load_document
from tests.support.chat_receiver import Inbox, free_port, receiver

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def investigation(deployment, commander):
    return investigation_actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )


@pytest.fixture
def inbox():
    return Inbox()


@pytest.fixture
def base(inbox):
    with receiver(inbox) as url:
        yield url


def _hooks(team, base):
    return {
        kind: ChatWebhook.objects.create(team=team, name=kind, kind=kind, url=f"{base}/{kind}")
        for kind in ChatKind.values
    }


def _send_all(update):
    deliveries = update.deliveries.select_related("webhook")
    return {d.webhook.kind: send_delivery(d.pk) for d in deliveries}


def test_an_update_reaches_each_chat_in_its_own_format(
    investigation, responder, team, base, inbox, settings
):
    settings.ATLAS_PUBLIC_URL = "https://atlas.example"
    _hooks(team, base)
    update = actions.post_status_update(
        investigation=investigation, text="Mitigating: max_num_seqs 64 -> 30", user=responder
    )
    outcomes = _send_all(update)
    assert {kind: o.state for kind, o in outcomes.items()} == dict.fromkeys(
        ChatKind.values, DeliveryState.SENT
    )
    (slack,) = inbox.at("/slack")
    assert slack.content_type == "application/json"
    body = slack.json()
    expected = f"Status update: {investigation}: Mitigating: max_num_seqs 64 -&gt; 30"
    assert body["text"] == expected
    assert body["blocks"][0]["type"] == "section"
    link = f"https://atlas.example/investigations/{investigation.pk}/"
    assert link in body["blocks"][0]["text"]["text"]
    (mattermost,) = inbox.at("/mattermost")
    assert mattermost.json()["username"] == "Atlas Console"
    assert "Mitigating: max_num_seqs 64 -> 30" in mattermost.json()["text"]
    (teams,) = inbox.at("/teams")
    card = teams.json()["attachments"][0]
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["content"]["body"][1]["text"] == "Mitigating: max_num_seqs 64 -> 30"
    assert card["content"]["body"][2]["text"].startswith(f"atlas-prod · {responder.username} · ")


def test_an_update_is_on_the_timeline_with_its_id(investigation, responder):
    update = actions.post_status_update(
        investigation=investigation, text="Identified: KV cache pressure", user=responder
    )
    event = TimelineEvent.objects.get(investigation=investigation, kind=EventKind.STATUS_UPDATE)
    assert event.data == {"update": str(update.pk), "text": "Identified: KV cache pressure"}
    assert event.actor == responder
    assert event.summary == "Status: Identified: KV cache pressure"
    timeline = load_document(Investigation.objects.get(pk=investigation.pk))["timeline"]
    assert {
        "kind": "status_update",
        "actor": responder.username,
        "summary": "Status: Identified: KV cache pressure",
    }.items() <= next(e for e in timeline if e["kind"] == "status_update").items()


def test_an_update_is_audited_with_the_post(investigation, responder):
    update = actions.post_status_update(
        investigation=investigation, text="Mitigating", user=responder
    )
    entry = AuditEntry.objects.get(action="investigation.status_update")
    assert (entry.actor, entry.investigation_id, entry.team_id) == (
        responder, investigation.pk, investigation.team_id,
    )  # fmt: skip
    assert (entry.object_type, entry.object_id) == ("comms.statusupdate", str(update.pk))
    assert entry.data == {"update": str(update.pk), "text": "Mitigating"}


def test_a_sent_delivery_is_never_sent_again(investigation, responder, team, base, inbox):
    _hooks(team, base)
    update = actions.post_status_update(investigation=investigation, text="x", user=responder)
    _send_all(update)
    again = _send_all(update)  # a redelivered task, a double enqueue
    assert {o.state for o in again.values()} == {DeliveryState.SENT}
    assert len(inbox.received) == 3
    assert set(Delivery.objects.values_list("attempts", flat=True)) == {1}


def test_a_chat_that_is_down_is_retried_on_the_schedule_then_failed(
    investigation, responder, team, settings
):
    settings.ATLAS_CHAT_RETRY_SCHEDULE = (1.0, 5.0)
    port = free_port()  # nothing listens: connection refused
    ChatWebhook.objects.create(
        team=team, name="ops", kind="slack", url=f"http://127.0.0.1:{port}/hook"
    )
    update = actions.post_status_update(investigation=investigation, text="x", user=responder)
    delivery = update.deliveries.get()
    assert send_delivery(delivery.pk).retry_in == 1.0
    assert send_delivery(delivery.pk).retry_in == 5.0
    last = send_delivery(delivery.pk)
    assert (last.state, last.retry_in) == (DeliveryState.FAILED, None)
    delivery.refresh_from_db()
    assert delivery.attempts == 3 and delivery.last_error.startswith("connect:")


def test_a_permanent_refusal_fails_at_once(investigation, responder, team, base, inbox):
    inbox.status = 404  # Slack's answer for a deleted webhook
    ChatWebhook.objects.create(team=team, name="gone", kind="slack", url=f"{base}/gone")
    update = actions.post_status_update(investigation=investigation, text="x", user=responder)
    outcome = send_delivery(update.deliveries.get().pk)
    assert (outcome.state, outcome.retry_in) == (DeliveryState.FAILED, None)
    assert update.deliveries.get().last_error == "http-status: HTTP 404 Not Found"


def test_the_guard_refuses_a_metadata_address_at_send_and_on_the_form(
    investigation, responder, team, commander, client_for, settings
):
    ChatWebhook.objects.create(
        team=team, name="imds", kind="slack", url="http://169.254.169.254/latest/"
    )
    update = actions.post_status_update(investigation=investigation, text="x", user=responder)
    outcome = send_delivery(update.deliveries.get().pk)
    assert outcome.state == DeliveryState.FAILED
    assert update.deliveries.get().last_error.startswith("blocked-address:")
    client = client_for(commander)
    response = client.post(
        reverse("comms:webhooks", args=[team.pk]),
        {"name": "meta", "kind": "slack", "url": "http://169.254.169.254/hook"},
    )
    assert response.status_code == 400
    assert not ChatWebhook.objects.filter(name="meta").exists()


def test_disabled_webhooks_get_nothing(investigation, responder, team, base):
    hook = ChatWebhook.objects.create(
        team=team, name="off", kind="slack", url=f"{base}/x", enabled=False
    )
    update = actions.post_status_update(investigation=investigation, text="x", user=responder)
    assert not update.deliveries.filter(webhook=hook).exists()


def test_a_closed_investigation_takes_no_updates(investigation, commander):
    Investigation.objects.filter(pk=investigation.pk).update(status=Investigation.Status.CLOSED)
    with pytest.raises(InvestigationClosed):
        actions.post_status_update(investigation=investigation, text="late", user=commander)
    assert not StatusUpdate.objects.exists()


def test_the_page_shows_the_current_status_and_the_form_by_role(
    investigation, responder, viewer, client_for
):
    client = client_for(responder)
    url = reverse("investigations:detail", args=[investigation.pk])
    response = client.post(
        reverse("comms:post_update", args=[investigation.pk]), {"text": "Monitoring the fix"}
    )
    assert response.status_code == 302
    page = client.get(url).content.decode()
    assert 'data-testid="current-status"' in page and "Monitoring the fix" in page
    assert 'name="text"' in page
    page = client_for(viewer).get(url).content.decode()
    assert "Monitoring the fix" in page and 'name="text"' not in page


def test_failed_deliveries_show_on_the_team_page_without_the_url(
    investigation, responder, viewer, team, client_for
):
    port = free_port()
    ChatWebhook.objects.create(
        team=team, name="ops-room", kind="mattermost", url=f"http://127.0.0.1:{port}/secret-hook"
    )
    update = actions.post_status_update(investigation=investigation, text="x", user=responder)
    Delivery.objects.filter(update=update).update(
        state=DeliveryState.FAILED, attempts=7, last_error="connect: refused"
    )
    page = client_for(viewer).get(reverse("teams:detail", args=[team.pk])).content.decode()
    assert 'data-testid="failed-deliveries"' in page and "ops-room" in page
    assert "connect: refused" in page and "secret-hook" not in page


def test_retry_failed_requeues_only_failed_rows(investigation, responder, team, base, inbox):
    hook = ChatWebhook.objects.create(team=team, name="ops", kind="slack", url=f"{base}/ops")
    update = actions.post_status_update(investigation=investigation, text="x", user=responder)
    Delivery.objects.filter(update=update).update(state=DeliveryState.FAILED, attempts=7)
    assert actions.retry_failed(webhook=hook) == 1
    assert send_delivery(update.deliveries.get().pk).state == DeliveryState.SENT
    assert actions.retry_failed(webhook=hook) == 0
    assert len(inbox.at("/ops")) == 1


def test_a_row_claimed_by_a_lost_worker_is_looked_at_again_after_the_claim(
    investigation, responder, team, base, inbox
):
    ChatWebhook.objects.create(team=team, name="ops", kind="teams", url=f"{base}/ops")
    update = actions.post_status_update(investigation=investigation, text="x", user=responder)
    delivery = update.deliveries.get()
    Delivery.objects.filter(pk=delivery.pk).update(
        claimed_until=timezone.now() + timedelta(seconds=30)
    )
    held = send_delivery(delivery.pk)
    assert held.state == DeliveryState.PENDING and 30 <= held.retry_in <= 32
    assert inbox.received == []
    Delivery.objects.filter(pk=delivery.pk).update(
        claimed_until=timezone.now() - timedelta(seconds=1)
    )
    assert send_delivery(delivery.pk).state == DeliveryState.SENT
    assert len(inbox.at("/ops")) == 1
