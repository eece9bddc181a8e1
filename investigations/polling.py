"""Keeping ``Deployment.polling_active`` true exactly while an investigation is open on it.

Probes decide what to poll from that flag alone: they sit below investigations and must
not query investigations to find out. So investigations maintains it, on every save or
delete that can change the answer (opening, closing, a deleted investigation), whichever
code path made the change.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_save

from deployments.models import Deployment
from investigations.models import Investigation

# Saves that touch neither of these cannot change whether a deployment has an open one.
_RELEVANT = frozenset({"status", "deployment", "deployment_id"})


def sync(deployment_id) -> bool:
    """Set the deployment's flag from its investigations; returns the flag.

    The deployment row is locked first, so an open and a close racing on one deployment
    settle on what both committed (the second to lock sees the first's change).
    """
    with transaction.atomic():
        locked = list(
            Deployment.objects.select_for_update()
            .filter(pk=deployment_id)
            .values_list("polling_active", flat=True)
        )
        if not locked:
            return False
        active = Investigation.objects.filter(
            deployment_id=deployment_id, status=Investigation.Status.OPEN
        ).exists()
        if locked[0] != active:
            Deployment.objects.filter(pk=deployment_id).update(polling_active=active)
        return active


def _moving(sender, instance: Investigation, update_fields=None, **kwargs) -> None:
    """Remember the deployment an investigation is leaving, to settle that one too."""
    if instance._state.adding or (
        update_fields is not None and not {"deployment", "deployment_id"} & set(update_fields)
    ):
        return
    before = (
        Investigation.objects.filter(pk=instance.pk).values_list("deployment_id", flat=True).first()
    )
    if before is not None and before != instance.deployment_id:
        instance._polling_left = before


def _saved(sender, instance: Investigation, update_fields=None, **kwargs) -> None:
    if update_fields is not None and not _RELEVANT & set(update_fields):
        return
    sync(instance.deployment_id)
    left = instance.__dict__.pop("_polling_left", None)
    if left is not None:
        sync(left)


def _deleted(sender, instance: Investigation, **kwargs) -> None:
    sync(instance.deployment_id)


def connect() -> None:
    pre_save.connect(_moving, sender=Investigation, dispatch_uid="investigations.polling.moving")
    post_save.connect(_saved, sender=Investigation, dispatch_uid="investigations.polling.saved")
    post_delete.connect(
        _deleted, sender=Investigation, dispatch_uid="investigations.polling.deleted"
    )
