"""Probe tasks: thin wrappers that take ids and primitives and write idempotently."""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime, timedelta

from celery import shared_task
from django.db import IntegrityError
from django.utils import timezone

from probes.models import WorkerHeartbeat

HEARTBEAT_RETENTION = timedelta(days=1)


@shared_task(name="probes.record_heartbeat", bind=True)
def record_heartbeat(self, tick: str | None = None, sent_at: str | None = None) -> None:
    """Record that a worker is consuming. ``tick`` makes redelivery harmless."""
    info = self.request
    tick_id = uuid.UUID(tick) if tick else uuid.UUID(info.id)
    sent = datetime.fromisoformat(sent_at) if sent_at else timezone.now()
    queue = (info.delivery_info or {}).get("routing_key", "") or ""
    # A concurrent redelivery may win the insert: the beat is recorded either way.
    with contextlib.suppress(IntegrityError):
        WorkerHeartbeat.objects.get_or_create(
            tick=tick_id,
            defaults={"hostname": info.hostname or "unknown", "queue": queue, "sent_at": sent},
        )
    # Keep the table small: liveness only ever looks at the last few minutes.
    WorkerHeartbeat.objects.filter(recorded_at__lt=timezone.now() - HEARTBEAT_RETENTION).delete()
