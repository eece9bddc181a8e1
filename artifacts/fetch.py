"""An artifact from a path or a profiler endpoint URL, analysed in-process (``diagnose``)."""

from __future__ import annotations

import tempfile

from artifacts.analysis import analyse_file
from artifacts.errors import ArtifactRejected
from artifacts.policy import artifact_fetch_policy, artifact_limits
from probes.collect import fetch_all


def fetch_and_analyse(source: str, kind: str | None = None) -> dict:
    """Raises ArtifactRejected for a fetch that failed as well as for a bad file."""
    if not source.startswith(("http://", "https://")):
        return analyse_file(source, kind, artifact_limits())
    (fetched,) = fetch_all([("artifact", source)], artifact_fetch_policy())
    if fetched.error is not None:
        raise ArtifactRejected(f"fetching {source} failed: {fetched.error}")
    with tempfile.NamedTemporaryFile(prefix="atlas-artifact-") as spool:
        spool.write(fetched.result.body)
        spool.flush()
        return analyse_file(spool.name, kind, artifact_limits())
