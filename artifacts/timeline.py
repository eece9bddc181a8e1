"""The artifact event on an investigation's timeline, written in one place for the upload,
the collection and the analysis (each said the same thing its own way before)."""

from __future__ import annotations

from typing import Any

from investigations.choices import EventKind
from investigations.timeline import record_event


def note(
    investigation: Any, summary: str, *, actor: Any = None, artifact: Any = None, target: Any = None
) -> None:
    """An ``artifact`` event on ``investigation`` (a row or its id) about ``artifact`` or,
    when nothing was stored (a failed collection), the profiler ``target`` it came from."""
    data = {"artifact": str(artifact.pk)} if artifact is not None else {"target": str(target.pk)}
    record_event(investigation, EventKind.ARTIFACT, actor=actor, summary=summary, data=data)
