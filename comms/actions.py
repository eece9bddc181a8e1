"""What people do with status updates and webhooks; views call these, tests too."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from comms import tasks
from comms.models import ChatWebhook, Delivery, DeliveryState, StatusUpdate
from investigations.actions import InvestigationClosed
from investigations.choices import EventKind
from investigations.models import Investigation
from investigations.timeline import record_event

TEXT_MAX = 2000


@transaction.atomic
def post_status_update(
    *, investigation: Investigation, text: str, user: Actor | Any
) -> StatusUpdate:
    """Record the update, its timeline event and one delivery per enabled webhook of the
    team, all or nothing; the sends are queued after the commit and never waited for."""
    text = text.strip()
    if not text:
        raise ValueError("a status update needs some text")
    if len(text) > TEXT_MAX:
        raise ValueError(f"a status update is at most {TEXT_MAX} characters")
    locked = Investigation.objects.select_for_update().get(pk=investigation.pk)
    if locked.status != Investigation.Status.OPEN:
        raise InvestigationClosed("updated")
    who = Actor.of(user)
    update = StatusUpdate.objects.create(
        investigation=locked, text=text, author=who.user, author_name=who.name[:200],
        at=timezone.now(),
    )  # fmt: skip
    record_event(
        locked,
        EventKind.STATUS_UPDATE,
        actor=who,
        data={"update": str(update.pk), "text": text},
        summary=f"Status: {text}",
        obj=update,
    )
    webhooks = ChatWebhook.objects.filter(team_id=locked.team_id, enabled=True)
    for webhook in webhooks:
        delivery = Delivery.objects.create(update=update, webhook=webhook)
        transaction.on_commit(partial(tasks.enqueue, delivery.pk))
    return update


def add_webhook(*, team, name: str, kind: str, url: str) -> ChatWebhook:
    return ChatWebhook.objects.create(team=team, name=name, kind=kind, url=url)


def set_enabled(*, webhook: ChatWebhook, enabled: bool) -> None:
    webhook.enabled = enabled
    webhook.save(update_fields=["enabled"])


def retry_failed(*, webhook: ChatWebhook) -> int:
    """Queue the webhook's failed deliveries again (after someone fixed the URL); returns
    how many. Sent ones are never resent."""
    ids = list(webhook.deliveries.filter(state=DeliveryState.FAILED).values_list("pk", flat=True))
    Delivery.objects.filter(pk__in=ids).update(state=DeliveryState.PENDING, attempts=0)
    for pk in ids:
        transaction.on_commit(partial(tasks.enqueue, pk))
    return len(ids)
