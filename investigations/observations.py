"""Stored observations as the view evaluation reads: (source, signal) -> labelled series.

One rule for the Celery path and for ``diagnose``: every series is tagged with the
target it came from, and an engine's per-rank series are left out (the aggregate is
what playbooks read; ranks are compared through GPU signals).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from probes.models import Observation, Target, TargetKind

SOURCE_OF_KIND = {
    TargetKind.ENGINE: "engine",
    TargetKind.SGLANG_INFO: "sglang_info",
    TargetKind.DCGM: "dcgm",
    TargetKind.NVML: "nvml",
    TargetKind.PROMETHEUS: "prometheus",
    TargetKind.LOG_HTTP: "log",
    TargetKind.LOG_FILE: "log",
}


def series_labels(source: str, target_key: str, labels: str) -> str | None:
    """The labels a series is known by in the view, or None to leave it out."""
    if source == "engine" and labels:
        return None
    return f"target={target_key}" + (f",{labels}" if labels else "")


def load_observations(deployment_id, start: datetime, end: datetime) -> dict:
    """Every observation of the deployment's targets in ``[start, end]``, oldest first."""
    kinds = dict(Target.objects.filter(deployment_id=deployment_id).values_list("pk", "kind"))
    rows = (
        Observation.objects.filter(
            target_id__in=list(kinds), taken_at__gte=start, taken_at__lte=end
        )
        .order_by("taken_at")
        .values_list("target_id", "signal", "labels", "taken_at", "value")
        .iterator(chunk_size=5000)
    )
    view: dict = defaultdict(lambda: defaultdict(list))
    for target_id, signal, labels, taken_at, value in rows:
        source = SOURCE_OF_KIND[kinds[target_id]]
        key = series_labels(source, str(target_id)[:8], labels)
        if key is not None:
            view[(source, signal)][key].append((taken_at.timestamp(), value))
    return {key: list(series.items()) for key, series in view.items()}
