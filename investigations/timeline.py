"""Writing the timeline: one ``record_event`` for every event, typed by ``EventKind``.

The timeline is read back by other modules (the postmortem's breaches, the chart's alarm
mark, the review statistics' verified time), so what they read is structured ``data``,
never the summary's wording: the summary is for people and may change. The events that
are someone's action (opening, a decision, a fix, the close) also go to the audit log, in
the same transaction, from the same call, so neither can be written without the other.

What each kind's ``data`` holds (keys other modules read are marked *):

=============  =============================================================
opened         opened_by*, symptom, fingerprint
decision       decision, node*, action*, automatic
fix            fix, node, key, parameters
closed         verification*, root_cause, override
alarm          firing* (bool), measured*, threshold*
suggestion     node, suggestion
verification   fix, state*
alert          labels, fingerprint*, status* (firing, resolved), ends_at
artifact       artifact or target
status_update  update* (the comms.StatusUpdate id), text
severity       severity*, previous* ("" when unset), reason
status         status*, previous*, reason, automatic*
role           role*, user* ("" when released), previous* ("" when none), op*, reason
=============  =============================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db import models, transaction

import audit
from audit.actor import Actor
from audit.models import Action
from investigations.choices import EventKind
from investigations.models import Investigation, TimelineEvent

SUMMARY_MAX = 500

# The audit action each kind of event is, when it is someone's action. Kinds absent here
# are what automation observed (the alarm, a suggestion, a verification state, an alert
# folded in, an artifact's analysis): timeline only. None: this event is not an action (a
# status that followed a decision, a fix or the verification: that action is audited).
AUDITED: dict[EventKind, Callable[[Mapping[str, Any]], str | None]] = {
    EventKind.OPENED: lambda data: Action.INVESTIGATION_OPEN,
    EventKind.DECISION: lambda data: Action.DECISION,
    EventKind.FIX: lambda data: Action.FIX,
    EventKind.CLOSED: lambda data: Action.CLOSE_OVERRIDE if data.get("override") else Action.CLOSE,
    EventKind.SEVERITY: lambda data: Action.SEVERITY,
    EventKind.STATUS_UPDATE: lambda data: Action.STATUS_UPDATE,
    EventKind.STATUS: lambda data: None if data.get("automatic") else Action.INCIDENT_STATUS,
    EventKind.ROLE: lambda data: Action.HANDOVER if data.get("op") == "handover" else Action.ROLE,
}


def record_event(
    investigation: Investigation | Any,
    kind: EventKind,
    *,
    actor: Actor | Any | None,
    data: Mapping[str, Any],
    summary: str,
    obj: models.Model | None = None,
    audit_summary: str = "",
    audit_data: Mapping[str, Any] | None = None,
) -> TimelineEvent:
    """Append one timeline event and, for an action (``AUDITED``), its audit entry.

    ``investigation`` is the row or its id. ``actor`` is an ``Actor``, a user, or None for
    automation. The audit entry names ``obj`` (default: the investigation) and repeats the
    summary and data unless ``audit_summary`` / ``audit_data`` say otherwise (the audit log
    names the investigation where the timeline, shown inside it, need not). Both rows are
    written in one transaction: the caller's, or a new one.
    """
    kind = EventKind(kind)
    who = Actor.of(actor)
    investigation_id = getattr(investigation, "pk", investigation)
    with transaction.atomic():
        event = TimelineEvent.objects.create(
            investigation_id=investigation_id,
            kind=kind,
            actor=who.user,
            actor_name=who.name[:200],
            summary=summary[:SUMMARY_MAX],
            data=dict(data),
        )
        audited = AUDITED.get(kind)
        action = audited(data) if audited is not None else None
        if action is not None:
            row = (
                investigation
                if isinstance(investigation, Investigation)
                else Investigation.objects.get(pk=investigation_id)
            )
            audit.record(
                action,
                actor=who,
                investigation=row,
                obj=obj if obj is not None else row,
                summary=audit_summary or summary,
                data=data if audit_data is None else audit_data,
            )
    return event
