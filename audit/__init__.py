"""The audit log. Actions call ``audit.record(...)`` inside their own transaction."""

from __future__ import annotations

from audit.actor import Actor

__all__ = ["Actor", "record"]


def record(action: str, **kwargs):
    """See ``audit.log.record`` (imported lazily: this package loads before the models)."""
    from audit.log import record as _record

    return _record(action, **kwargs)
