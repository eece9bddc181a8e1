"""Chat delivery survives the receiver being down for a minute, for real: a Celery worker
process, the product's broker, the test database, and an HTTP receiver on 127.0.0.1 that
refuses connections for 60 s and then comes up at the same URL. The retry schedule is
shortened by its setting (ATLAS_CHAT_RETRY_SCHEDULE) so the test takes a minute and a bit,
not the default's minutes; the outage itself is not shortened.

On recovery the update arrives exactly once, and a second copy of the task (a broker
redelivery after the send) posts nothing."""

from __future__ import annotations

import time

import pytest
from kombu import Connection

from comms import actions
from comms.models import ChatWebhook, Delivery, DeliveryState
from comms.tasks import deliver
from investigations import actions as investigation_actions
from tests.support.chat_receiver import Inbox, free_port, receiver
from tests.support.workers import broker_for, celery_worker, wait_for

OUTAGE_S = 60.0
# Cumulative tries at 0, 2, 6, 14, 30, 62, 94 s: the sixth lands after the outage.
SCHEDULE = "2,4,8,16,32,32"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_minute_long_chat_outage_costs_retries_not_the_update(
    team, responder, deployment, tmp_path
):
    url, options, worker_env = broker_for("embedded", tmp_path)
    investigation = investigation_actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=responder
    )
    port = free_port()
    ChatWebhook.objects.create(
        team=team, name="ops", kind="mattermost", url=f"http://127.0.0.1:{port}/hooks/abc"
    )
    update = actions.post_status_update(
        investigation=investigation, text="Identified: KV cache pressure", user=responder
    )
    delivery = update.deliveries.get()
    inbox = Inbox()
    extra = {"ATLAS_CHAT_RETRY_SCHEDULE": SCHEDULE, "ATLAS_CHAT_TIMEOUT": "2"}
    with celery_worker(worker_env, tmp_path, extra_env=extra) as (queue, _process):
        log = tmp_path / "worker.log"
        with Connection(url, transport_options=options) as conn:
            deliver.apply_async(args=[str(delivery.pk)], queue=queue, connection=conn)
        down_since = time.monotonic()
        assert wait_for(
            lambda: Delivery.objects.filter(pk=delivery.pk, attempts__gte=2).exists(), 30
        ), log.read_text()[-3000:]
        retrying = Delivery.objects.get(pk=delivery.pk)
        assert retrying.state == DeliveryState.RETRYING
        assert retrying.last_error.startswith("connect:")
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_since)))
        attempts_while_down = Delivery.objects.get(pk=delivery.pk).attempts
        with receiver(inbox, port):
            sent = wait_for(
                lambda: Delivery.objects.filter(pk=delivery.pk, state=DeliveryState.SENT).exists(),
                60,
            )
            assert sent, log.read_text()[-3000:]
            # A second copy of the task after the send: the sent row is not sent again.
            with Connection(url, transport_options=options) as conn:
                deliver.apply_async(args=[str(delivery.pk)], queue=queue, connection=conn)
            assert wait_for(lambda: "comms.deliver" in log.read_text() and _done(log) >= 2, 30)
            time.sleep(1.0)
    done = Delivery.objects.get(pk=delivery.pk)
    (received,) = inbox.at("/hooks/abc")
    assert "Identified: KV cache pressure" in received.json()["text"]
    assert attempts_while_down >= 5  # tries at 0, 2, 6, 14, 30 s all refused
    assert done.attempts == attempts_while_down + 1
    assert done.last_error == "" and done.sent_at is not None


def _done(log) -> int:
    """Tasks the worker finished (succeeded), from its log."""
    return log.read_text().count("succeeded in")
