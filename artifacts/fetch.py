"""An artifact from a path or a profiler endpoint URL, analysed in-process (``diagnose``)."""

from __future__ import annotations

import tempfile
from dataclasses import replace

from django.conf import settings

from artifacts.analysis import analyse_file
from artifacts.bounded import Limits
from artifacts.errors import ArtifactRejected
from probes.collect import fetch_all
from probes.policy import fetch_policy


def _limits() -> Limits:
    return Limits(
        max_file_bytes=settings.ATLAS_ARTIFACT_MAX_BYTES,
        max_expanded_bytes=settings.ATLAS_ARTIFACT_MAX_EXPANDED_BYTES,
        deadline_s=float(settings.ATLAS_ARTIFACT_TIME_LIMIT),
    )


def fetch_and_analyse(source: str, kind: str | None = None) -> dict:
    """Raises ArtifactRejected for a fetch that failed as well as for a bad file."""
    if not source.startswith(("http://", "https://")):
        return analyse_file(source, kind, _limits())
    timeout = float(settings.ATLAS_ARTIFACT_FETCH_TIMEOUT)
    policy = replace(
        fetch_policy(),
        max_bytes=settings.ATLAS_ARTIFACT_MAX_BYTES,
        read_timeout=timeout,
        total_timeout=timeout,
    )
    (fetched,) = fetch_all([("artifact", source)], policy)
    if fetched.error is not None:
        raise ArtifactRejected(f"fetching {source} failed: {fetched.error}")
    with tempfile.NamedTemporaryFile(prefix="atlas-artifact-") as spool:
        spool.write(fetched.result.body)
        spool.flush()
        return analyse_file(spool.name, kind, _limits())
