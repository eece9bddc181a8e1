"""The Celery side of chat delivery: one task per delivery, retried on its own schedule
(``ATLAS_CHAT_RETRY_SCHEDULE``), not Celery's backoff, so the team page can say when."""

from __future__ import annotations

import logging

from celery import current_app, shared_task

from comms.delivery import send_delivery

log = logging.getLogger(__name__)


@shared_task(name="comms.deliver", bind=True, max_retries=None, acks_late=True)
def deliver(self, delivery_id: str) -> str:
    """Send one status update to one webhook; returns the delivery's state."""
    outcome = send_delivery(delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.state


def enqueue(delivery_id) -> None:
    """After the update commits. A broker that is down costs the chat post (the delivery
    stays pending, shown on the team page), never the update itself."""
    try:
        current_app.send_task("comms.deliver", args=[str(delivery_id)])
    except Exception:
        log.exception("comms.deliver.not-sent", extra={"delivery": str(delivery_id)})
