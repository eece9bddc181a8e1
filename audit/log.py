"""Writing audit entries, and the queries the pages read them with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import models, transaction

from audit.actor import Actor
from audit.models import Action, AuditEntry

SUMMARY_MAX = 500


class NotInTransaction(RuntimeError):
    """``record`` was called outside the action's transaction."""


def record(
    action: str,
    *,
    actor=None,
    actor_name: str = "",
    team=None,
    investigation=None,
    obj: models.Model | None = None,
    summary: str,
    data: Mapping[str, Any] | None = None,
) -> AuditEntry:
    """Append one entry in the caller's transaction.

    Refuses to run outside a transaction: an entry committed without its action (or an
    action committed without its entry) is exactly what an audit log must never show.
    ``actor`` is the user, or None for automation; ``actor_name`` then says which (an API
    token's name, an alert). An ``audit.actor.Actor`` may be given instead of both. The
    team comes from the investigation when not given.
    """
    if not transaction.get_connection().in_atomic_block:
        raise NotInTransaction(f"audit.record({action!r}) must run inside the action's transaction")
    if action not in Action.values:
        raise ValueError(f"unknown audit action {action!r}")
    if isinstance(actor, Actor):
        actor_name = actor_name or actor.name
        actor = actor.user
    if team is None and investigation is not None:
        team = investigation.team_id
    name = actor.get_username() if actor is not None else (actor_name or "automation")
    return AuditEntry.objects.create(
        actor=actor,
        actor_name=name[:200],
        team_id=getattr(team, "pk", team),
        investigation=investigation,
        action=action,
        object_type=obj._meta.label_lower if obj is not None else "",
        object_id=str(obj.pk) if obj is not None else "",
        summary=summary[:SUMMARY_MAX],
        data=dict(data or {}),
    )


def for_investigation(investigation, limit: int = 100):
    return AuditEntry.objects.filter(investigation=investigation)[:limit]


def for_team(team, *, action: str = "", limit: int = 200):
    entries = AuditEntry.objects.filter(team=team)
    if action:
        entries = entries.filter(action=action)
    return entries.select_related("investigation")[:limit]
