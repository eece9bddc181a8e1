"""Is evidence flowing? Pure reading of heartbeats, for the status strip on every page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from probes.models import WorkerHeartbeat


@dataclass(frozen=True)
class WorkerStatus:
    alive: bool
    last_seen: datetime | None
    hostnames: tuple[str, ...]
    reason: str


def worker_status(now: datetime | None = None) -> WorkerStatus:
    """Workers count as alive if one recorded a beat within three heartbeat periods."""
    now = now or timezone.now()
    window = timedelta(seconds=3 * settings.ATLAS_HEARTBEAT_SECONDS)
    try:
        recent = list(
            WorkerHeartbeat.objects.filter(recorded_at__gte=now - window)
            .order_by("-recorded_at")
            .values_list("hostname", "recorded_at")[:50]
        )
        last = (
            recent[0][1]
            if recent
            else (
                WorkerHeartbeat.objects.order_by("-recorded_at")
                .values_list("recorded_at", flat=True)
                .first()
            )
        )
    except DatabaseError:
        return WorkerStatus(False, None, (), "database unreachable")
    if recent:
        hosts = tuple(sorted({host for host, _ in recent}))
        return WorkerStatus(True, last, hosts, "")
    reason = "no worker has ever reported" if last is None else "no heartbeat recently"
    return WorkerStatus(False, last, (), reason)
