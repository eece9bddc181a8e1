"""The configured bounds for artifacts (see settings: ATLAS_ARTIFACT_*), in one place for
the analysis task, the collector and diagnose."""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings

from artifacts.bounded import Limits
from probes.net import FetchPolicy
from probes.policy import fetch_policy


def artifact_limits() -> Limits:
    return Limits(
        max_file_bytes=settings.ATLAS_ARTIFACT_MAX_BYTES,
        max_expanded_bytes=settings.ATLAS_ARTIFACT_MAX_EXPANDED_BYTES,
        deadline_s=float(settings.ATLAS_ARTIFACT_TIME_LIMIT),
    )


def artifact_fetch_policy() -> FetchPolicy:
    """The probes' guarded policy, with the artifact size cap and fetch deadline."""
    timeout = float(settings.ATLAS_ARTIFACT_FETCH_TIMEOUT)
    return replace(
        fetch_policy(),
        max_bytes=settings.ATLAS_ARTIFACT_MAX_BYTES,
        read_timeout=timeout,
        total_timeout=timeout,
    )
