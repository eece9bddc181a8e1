"""The investigation vocabulary, in one place: node states, suggestions, decision actions,
verification states and timeline event kinds.

Django-free (``StrEnum``), so the pure evaluation and verification modules use the same
names as the models, views and templates. Each value is the string stored in the
database, frozen in closed records and compared in templates: a member *is* that string
(``NodeState.CONFIRMED == "confirmed"``), so rows written before these enums existed read
back unchanged. Never rename a value; add a member instead.
"""

from __future__ import annotations

from enum import StrEnum


class _Choices(StrEnum):
    """A ``StrEnum`` that also gives Django field choices (value, label)."""

    @property
    def label(self) -> str:
        return self.value.replace("_", " ").capitalize()

    @classmethod
    def choices(cls) -> list[tuple[str, str]]:
        return [(member.value, member.label) for member in cls]


class NodeState(_Choices):
    """A hypothesis's state; only decisions (a person's or an auto-apply rule's) set it."""

    OPEN = "open"
    CONFIRMED = "confirmed"
    ELIMINATED = "eliminated"


class Suggestion(_Choices):
    """What the evidence suggests for a node, and each check's outcome: a suggestion is
    never a decision, and missing data is inconclusive, never an elimination."""

    CONFIRM = "confirm"
    ELIMINATE = "eliminate"
    INCONCLUSIVE = "inconclusive"


class DecisionAction(_Choices):
    CONFIRM = "confirm"
    ELIMINATE = "eliminate"
    REOPEN = "reopen"


STATE_AFTER: dict[str, NodeState] = {
    DecisionAction.CONFIRM: NodeState.CONFIRMED,
    DecisionAction.ELIMINATE: NodeState.ELIMINATED,
    DecisionAction.REOPEN: NodeState.OPEN,
}
"""A node's state after each decision action (the latest decision wins)."""


class VerificationState(_Choices):
    """A fix's verification against the measurement that raised the alarm. ``NONE`` is
    what the close records when there was no fix to verify."""

    PENDING = "pending"
    PASSING = "passing"
    FAILING = "failing"
    # It passes, but the alarm's measurement had recovered before the fix took effect.
    UNATTRIBUTABLE = "unattributable"
    NONE = "none"


class EventKind(_Choices):
    """What a timeline event is. Each kind's ``data`` (see ``investigations.timeline``)
    carries what other modules read back; the summary is only for people to read."""

    OPENED = "opened"
    DECISION = "decision"
    FIX = "fix"
    CLOSED = "closed"
    ALARM = "alarm"
    SUGGESTION = "suggestion"
    VERIFICATION = "verification"
    ALERT = "alert"
    ARTIFACT = "artifact"
    # A "current status" post (comms): data holds update* (its id) and text.
    STATUS_UPDATE = "status_update"
    # The severity set or changed: data holds severity* (new), previous* ("" when unset)
    # and reason.
    SEVERITY = "severity"
    # The incident status moved (IncidentStatus): data holds status*, previous*, reason and
    # automatic* (True when it followed a decision, a fix, the verification or the close).
    STATUS = "status"
    # An incident role assigned, handed over or released (IncidentRole): data holds role*,
    # user* (the holder's username; "" when released), previous* (the holder before, "" when
    # none), op* (assign, handover, release) and reason.
    ROLE = "role"


class Severity(_Choices):
    """How bad the incident is, in the SEV1 (worst) to SEV4 scale on-call teams use; the
    definition is shown wherever one is chosen, so two people mean the same by SEV2."""

    SEV1 = "sev1"
    SEV2 = "sev2"
    SEV3 = "sev3"
    SEV4 = "sev4"

    @property
    def label(self) -> str:
        return self.value.upper()

    @property
    def definition(self) -> str:
        return SEVERITY_DEFINITIONS[self]


SEVERITY_DEFINITIONS: dict[str, str] = {
    Severity.SEV1: "Critical: the service is down or unusable for most users, or data is at "
    "risk. All hands; status updates at least every 30 minutes.",
    Severity.SEV2: "Major: a core function is badly degraded (latency or errors well past the "
    "SLO) for many users. Commander and responders now; updates hourly.",
    Severity.SEV3: "Minor: a partial or intermittent degradation with a workaround, or an SLO "
    "burning slowly. Worked in business hours.",
    Severity.SEV4: "Low: little or no user impact (a cosmetic issue, a near miss, one replica "
    "affected). Tracked, no paging.",
}


class IncidentStatus(_Choices):
    """Where the incident stands, as on-call status pages say it. It follows the record
    forward where it can (a confirmed cause: identified; a recorded fix: monitoring; the
    fix's verification passing or the close: resolved) and a commander may set it, with a
    reason, either way."""

    INVESTIGATING = "investigating"
    IDENTIFIED = "identified"
    MONITORING = "monitoring"
    RESOLVED = "resolved"


STATUS_RANK: dict[str, int] = {status: rank for rank, status in enumerate(IncidentStatus)}
"""The order the statuses follow; the automatic following only ever moves forward."""


class IncidentRole(_Choices):
    """A person's role in one investigation (not their team role, which says what they
    may do): one commander, scribe and communications lead at a time, any responders."""

    COMMANDER = "commander"
    SCRIBE = "scribe"
    COMMS_LEAD = "comms_lead"
    RESPONDER = "responder"

    @property
    def label(self) -> str:
        return ROLE_LABELS[self]


ROLE_LABELS: dict[str, str] = {
    IncidentRole.COMMANDER: "Incident commander",
    IncidentRole.SCRIBE: "Scribe",
    IncidentRole.COMMS_LEAD: "Communications lead",
    IncidentRole.RESPONDER: "Responder",
}

SINGLE_HOLDER_ROLES = frozenset(
    {IncidentRole.COMMANDER, IncidentRole.SCRIBE, IncidentRole.COMMS_LEAD}
)
"""Roles one person holds at a time: assigning one to someone else is a handover."""
