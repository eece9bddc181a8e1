"""The home page's list of investigations, from what is stored: no evaluation per row.

Each poll cycle stores the last suggestions, whether the alarm is firing and the evaluated
verification of the latest fix (cycle.py), and decisions and fixes are rows; that is enough
to say, for dozens of investigations in a handful of queries, what leads and where the fix
stands.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from investigations.causes import CAUSE_KEYS
from investigations.choices import STATE_AFTER, NodeState, Suggestion, VerificationState
from investigations.models import Decision, FixRecord, Investigation


@dataclass(frozen=True)
class Row:
    investigation: Investigation
    leading_cause: str | None
    leading_why: str  # "confirmed" by a person, or "suggested" by the evidence
    alarm_firing: bool | None
    fix_key: str | None
    fix_applied_at: datetime | None
    # The latest fix's verification as the last poll cycle evaluated it: passing, failing
    # or pending (also until a cycle has evaluated this fix at all).
    verification: str | None = None


def rows(investigations: Iterable[Investigation]) -> list[Row]:
    investigations = list(investigations)
    ids = [i.pk for i in investigations]
    states: dict = {}
    for inv_id, node, action in (
        Decision.objects.filter(investigation_id__in=ids)
        .order_by("investigation_id", "sequence")
        .values_list("investigation_id", "node", "action")
    ):
        states.setdefault(inv_id, {})[node] = STATE_AFTER[action]
    fixes: dict = {}
    for inv_id, fix_id, key, applied_at in (
        FixRecord.objects.filter(investigation_id__in=ids)
        .order_by("investigation_id", "applied_at")
        .values_list("investigation_id", "pk", "key", "applied_at")
    ):
        fixes[inv_id] = (str(fix_id), key, applied_at)  # the latest wins
    out = []
    for inv in investigations:
        decided = states.get(inv.pk, {})
        confirmed = [k for k, s in decided.items() if s == NodeState.CONFIRMED and k in CAUSE_KEYS]
        suggested = [
            k
            for k, s in (inv.last_suggestions or {}).items()
            if s == Suggestion.CONFIRM
            and k in CAUSE_KEYS
            and decided.get(k) != NodeState.ELIMINATED
        ]
        if inv.root_cause:
            lead, why = inv.root_cause, "root cause"
        elif confirmed:
            lead, why = confirmed[-1], "confirmed"
        elif suggested:
            lead, why = sorted(suggested)[0], "suggested"
        else:
            lead, why = None, ""
        fix_id, key, applied_at = fixes.get(inv.pk, (None, None, None))
        out.append(
            Row(inv, lead, why, inv.alarm_firing, key, applied_at, _verification(inv, fix_id))
        )
    return out


def _verification(inv: Investigation, fix_id: str | None) -> str | None:
    if fix_id is None:
        return None
    stored = (inv.last_suggestions or {}).get("_verification")
    if isinstance(stored, dict) and stored.get("fix") == fix_id:
        state = stored.get("state")
        if state in (
            VerificationState.PASSING,
            VerificationState.FAILING,
            VerificationState.PENDING,
            VerificationState.UNATTRIBUTABLE,
        ):
            return state
    return VerificationState.PENDING
