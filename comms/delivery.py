"""Sending one delivery: claim the row, post the chat's body through the probes' network
guard, record the outcome. Runs in a Celery task (``comms.tasks.deliver``); nothing here
is on the investigation's path, so a chat outage never blocks a responder.

Idempotent per (update, webhook): a sent row is never sent again, and a row another copy
of the task is sending (``claimed_until`` in the future) is skipped. What is not knowable
is a post the chat acted on whose answer never arrived (a timeout after the body left):
that is retried, so such a post may show twice. Every other failure is either before the
body was read (refused, DNS, blocked address) or an answer saying it was not accepted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from comms.models import Delivery, DeliveryState, StatusUpdate
from comms.payloads import Message, build
from comms.schedule import retry_after
from probes import net

log = logging.getLogger(__name__)
# Longer than one attempt can take (connect + the overall deadline), so a claim outlives
# the send it guards; a worker killed mid-send frees the row after this.
CLAIM_S = 120


@dataclass(frozen=True)
class Outcome:
    state: str
    retry_in: float | None = None  # seconds, when the task should try again


def policy() -> net.FetchPolicy:
    timeout = float(settings.ATLAS_CHAT_TIMEOUT)
    return net.FetchPolicy(
        allowed_networks=settings.ATLAS_CHAT_ALLOWED_NETWORKS,
        connect_timeout=min(5.0, timeout),
        read_timeout=timeout,
        total_timeout=timeout,
        max_bytes=64 * 1024,  # a webhook answers "ok" or a short error
        max_redirects=0,
    )


def message_of(update: StatusUpdate) -> Message:
    investigation = update.investigation
    base = settings.ATLAS_PUBLIC_URL
    link = base + reverse("investigations:detail", args=[investigation.pk]) if base else ""
    return Message(
        title=str(investigation),
        deployment=investigation.deployment.name,
        text=update.text,
        author=update.author_name or "someone",
        at=update.at,
        link=link,
    )


def _claim(delivery_id) -> bool:
    now = timezone.now()
    claimed = (
        Delivery.objects.filter(
            pk=delivery_id, state__in=[DeliveryState.PENDING, DeliveryState.RETRYING]
        )
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + timedelta(seconds=CLAIM_S))
    )
    return claimed == 1


def send_delivery(delivery_id) -> Outcome:
    """One attempt at one delivery; what the task does next is in the outcome."""
    if not _claim(delivery_id):
        row = Delivery.objects.filter(pk=delivery_id).values("state", "claimed_until").first()
        if row is None:
            return Outcome("missing")
        if row["state"] in (DeliveryState.SENT, DeliveryState.FAILED):
            return Outcome(row["state"])
        # Another copy holds the claim: sending now, or killed mid-send (its claim then
        # lapses). Look again once it has, so a lost worker never strands the row.
        wait = (row["claimed_until"] - timezone.now()).total_seconds()
        return Outcome(row["state"], retry_in=max(1.0, wait + 1.0))
    delivery = Delivery.objects.select_related("webhook", "update__investigation__deployment").get(
        pk=delivery_id
    )
    webhook = delivery.webhook
    error: net.ProbeError | None = None
    if not webhook.enabled:
        error = net.ProbeError("disabled", "the webhook was disabled", transient=False)
    else:
        body = json.dumps(build(webhook.kind, message_of(delivery.update))).encode()
        try:
            net.post(webhook.url, body, policy())
        except net.ProbeError as exc:
            error = exc
    attempts = delivery.attempts + 1
    now = timezone.now()
    with transaction.atomic():
        if error is None:
            state, wait = DeliveryState.SENT, None
        else:
            wait = retry_after(attempts, error.transient, settings.ATLAS_CHAT_RETRY_SCHEDULE)
            state = DeliveryState.RETRYING if wait is not None else DeliveryState.FAILED
        Delivery.objects.filter(pk=delivery.pk).update(
            state=state,
            attempts=attempts,
            last_attempt_at=now,
            sent_at=now if error is None else None,
            last_error="" if error is None else str(error)[:500],
            claimed_until=None,
        )
    if error is not None:
        log.warning(
            "comms.delivery.failed",
            extra={"delivery": str(delivery.pk), "attempts": attempts, "error": str(error)},
        )
    return Outcome(state, wait)
