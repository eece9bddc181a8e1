"""Collecting artifacts from profiler endpoints (a real engine's exporter, or enginesim's
``/profiler/...``): one guarded fetch per target, each body stored like an upload.

Bodies can be large, so the probe's usual 8 MiB cap is raised to the artifact limit and the
deadline to the artifact fetch timeout; the SSRF guard is the probes' own.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.utils import timezone

from artifacts import actions, timeline
from artifacts.models import Artifact, Source
from artifacts.policy import artifact_fetch_policy
from investigations.models import Investigation
from probes.collect import fetch_all
from probes.models import Target, TargetKind


def collect_for(
    investigation_id: str, user_id: int | None = None, *, store: Callable[..., Artifact]
) -> int:
    """Fetch each enabled profiler target once and keep each body with ``store`` (the task
    passes ``store_and_analyse``); returns how many were stored."""
    investigation = Investigation.objects.select_related("deployment").get(pk=investigation_id)
    targets = list(
        Target.objects.filter(
            deployment_id=investigation.deployment_id, kind=TargetKind.PROFILER, enabled=True
        ).order_by("replica", "url")
    )
    if not targets:
        return 0
    policy = artifact_fetch_policy()
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    fetched = fetch_all([(str(t.pk), t.url) for t in targets], policy, concurrency=4)
    stored = 0
    for target, outcome in zip(targets, fetched, strict=True):
        if outcome.error is not None:
            _note(
                investigation, user, target, f"Collecting from {target.url} failed: {outcome.error}"
            )
            continue
        body = outcome.result.body
        try:
            store(
                deployment=investigation.deployment,
                investigation=investigation,
                chunks=[body],
                name=_name_for(target),
                source=Source.PROBE,
                user=user,
                source_url=target.url,
                captured_at=timezone.now(),
            )
        except actions.UploadRejected as exc:
            _note(investigation, user, target, f"{target.url} answered, but: {exc}")
            continue
        stored += 1
    return stored


def _note(investigation: Investigation, user, target: Target, summary: str) -> None:
    timeline.note(investigation, summary, actor=user, target=target)


def _name_for(target: Target) -> str:
    tail = target.url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0] or "artifact"
    return f"{tail}-{target.replica}" if target.replica else tail
