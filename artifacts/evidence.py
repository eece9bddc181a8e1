"""Analysed artifacts as evidence: their signals join the observation view evaluation
reads (``investigations.observations``), under source ``artifact``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from artifacts.models import Artifact, Status

PREFIX = "artifact_"


def add_artifact_signals(view, deployment_id, windows: Mapping[str, int], now: datetime) -> None:
    """Analysed profiler artifacts are evidence at the time they describe, one series per
    artifact (so a max over the window reads the worst file, not a blend)."""
    oldest = now - timedelta(seconds=max(windows.values()))
    rows = Artifact.objects.filter(
        deployment_id=deployment_id,
        status=Status.DONE,
        captured_at__gt=oldest,
        captured_at__lte=now,
    ).values_list("pk", "captured_at", "signals")
    for pk, captured_at, signals in rows:
        for signal, value in (signals or {}).items():
            window = windows.get(signal)
            if window is None or captured_at <= now - timedelta(seconds=window):
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                view[("artifact", signal)][f"artifact={str(pk)[:8]}"].append(
                    (captured_at.timestamp(), float(value))
                )
