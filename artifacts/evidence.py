"""Analysed artifacts as evidence: their signals are written as ordinary observations,
source ``artifact``, so evaluation reads them through the one observation read path
(``investigations.observations``) like every other signal.

Each artifact is its own series (``artifact=<first 8 of its id>``, so a max over a window
reads the worst file, not a blend) with one value at ``captured_at``, the time it
describes. They live on the deployment's one target of the stored ``artifacts`` kind
(``probes.kinds``): never polled, never shown as a probe, and left alone by retention,
since the artifact row they came from is kept as long as its deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from probes.kinds import ARTIFACT, kind_of, stored_values
from probes.models import Observation
from probes.store import SIGNAL_MAX, record_observations, stored_target

# The stored kind that holds artifact signals (the registry's one entry of source artifact).
KIND = next(v for v in stored_values() if kind_of(v).source is ARTIFACT)


def series_label(artifact_id) -> str:
    """The label that tells one artifact's series from another's."""
    return f"artifact={str(artifact_id)[:8]}"


def observations_of(artifact_id, signals: Mapping[str, object]) -> list[tuple[str, str, float]]:
    """(signal, labels, value) for each numeric signal a playbook may name: bools, text and
    names outside the artifact vocabulary (or too long to store whole) were never read."""
    label = series_label(artifact_id)
    return [
        (name, label, float(value))
        for name, value in signals.items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and len(name) <= SIGNAL_MAX
        and ARTIFACT.signals.match(name)
    ]


def record_signals(
    artifact_id, deployment_id, captured_at: datetime, signals: Mapping[str, object]
) -> int:
    """Write an analysed artifact's signals as observations; idempotent (a redelivered
    analysis writes nothing twice). Returns how many values it holds."""
    found = observations_of(artifact_id, signals)
    if found:
        record_observations(stored_target(deployment_id, KIND), captured_at, found)
    return len(found)


def forget(artifact) -> int:
    """Delete a deleted artifact's observations, so nothing counts evidence whose file is
    gone (``post_delete``, connected in the app config). Artifacts are only deleted with
    their deployment today, whose targets take the rows with them; this keeps any other
    delete path honest. Returns the rows deleted."""
    return Observation.objects.filter(
        target__deployment_id=artifact.deployment_id,
        target__kind=KIND,
        labels=series_label(artifact.pk),
        taken_at=artifact.captured_at,
    ).delete()[0]
