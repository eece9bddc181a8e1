"""Stored observations as the view evaluation reads: (source, signal) -> labelled series.

One rule for the Celery path and for ``diagnose``: every series is tagged with the
target it came from, and an engine's per-rank series are left out (the aggregate is
what playbooks read; ranks are compared through GPU signals).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime, timedelta

from django.db.models import Q

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


# Signals evaluation reads beyond the playbook's own measures (expected values).
EXPECTED_INPUTS = {
    "prompt_tokens_rate": 300,
    "e2e_count_rate": 300,
    "kv_cache_usage": 300,
    "requests_running": 300,
    "generation_tokens_rate": 300,
}


def load_observations(deployment_id, signals: Mapping[str, int], now: datetime) -> dict:
    """The deployment's observations of ``signals`` (name -> window seconds), each only as
    far back as its own window: a 48-hour log count must not drag in 48 hours of every
    engine gauge on each page refresh."""
    kinds = dict(
        Target.objects.filter(
            deployment_id=deployment_id, kind__in=list(SOURCE_OF_KIND)
        ).values_list("pk", "kind")
    )
    wanted = {**EXPECTED_INPUTS}
    for signal, window in signals.items():
        wanted[signal] = max(window, wanted.get(signal, 0))
    condition = Q(pk__in=[])
    for signal, window in wanted.items():
        condition |= Q(signal=signal, taken_at__gt=now - timedelta(seconds=window))
    rows = (
        Observation.objects.filter(condition, target_id__in=list(kinds), taken_at__lte=now)
        .order_by("taken_at")
        .values_list("target_id", "signal", "labels", "taken_at", "value")
        .iterator(chunk_size=5000)
    )
    view: dict = defaultdict(lambda: defaultdict(list))
    artifact_windows = {s: w for s, w in wanted.items() if s.startswith("artifact_")}
    if artifact_windows:
        _add_artifact_signals(view, deployment_id, artifact_windows, now)
    for target_id, signal, labels, taken_at, value in rows:
        source = SOURCE_OF_KIND[kinds[target_id]]
        key = series_labels(source, str(target_id)[:8], labels)
        if key is not None:
            view[(source, signal)][key].append((taken_at.timestamp(), value))
    return {key: list(series.items()) for key, series in view.items()}


def _add_artifact_signals(view, deployment_id, windows: Mapping[str, int], now: datetime) -> None:
    """Analysed profiler artifacts are evidence at the time they describe, one series per
    artifact (so a max over the window reads the worst file, not a blend)."""
    from artifacts.models import Artifact, Status

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


def signals_of(playbook) -> dict[str, int]:
    """Signal name -> the longest window any of the playbook's measures reads it over."""
    out: dict[str, int] = {}
    for measure in playbook.measures():
        out[measure.signal] = max(measure.window_s, out.get(measure.signal, 0))
    return out
