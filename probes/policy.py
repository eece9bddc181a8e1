"""The fetch policy configured for this deployment (see settings: ATLAS_PROBE_*)."""

from __future__ import annotations

from django.conf import settings

from probes.net import FetchPolicy


def fetch_policy() -> FetchPolicy:
    total = float(settings.ATLAS_PROBE_TIMEOUT)
    return FetchPolicy(
        allowed_networks=settings.ATLAS_PROBE_ALLOWED_NETWORKS,
        connect_timeout=min(2.0, total),
        read_timeout=min(5.0, total),
        total_timeout=total,
        max_bytes=settings.ATLAS_PROBE_MAX_BYTES,
    )
