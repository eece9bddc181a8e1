"""A drill ends when its investigation is closed, however it was closed."""

from __future__ import annotations

from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone

from investigations.models import Investigation


@receiver(post_save, sender=Investigation, dispatch_uid="drills-finish-on-close")
def finish_on_close(sender, instance: Investigation, **kwargs) -> None:
    if not instance.is_drill or instance.status != Investigation.Status.CLOSED:
        return
    from drills.models import Drill

    Drill.objects.filter(investigation=instance, finished_at__isnull=True).update(
        finished_at=instance.closed_at or timezone.now()
    )
