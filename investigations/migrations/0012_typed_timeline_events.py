"""Timeline events become typed: ``kind`` takes its choices from ``EventKind``, and the
structured ``data`` that modules now read (instead of parsing the summary) is filled in
for rows written before they stored it.

What is recovered, only where the key is missing (a key already there is never changed):

* alarm: ``firing`` from the summary's "Alarm firing" / "Alarm clear", and ``measured`` /
  ``threshold`` from its "X against Y";
* opened: ``opened_by`` from ``Investigation.opened_by_name``, else from the summary's
  "... by NAME"; ``symptom`` from the investigation;
* decision: ``action`` and ``node`` from "ACTION NODE: reason";
* fix: ``key`` and ``node`` from "Applied KEY for NODE";
* closed: ``override`` from "Closed with override", ``root_cause`` from the investigation,
  ``verification`` from its frozen closing facts;
* suggestion: ``suggestion`` and ``node`` from "Evidence suggests SUGGESTION NODE (...)";
* verification: ``state`` from "Verification of KEY STATE".

``actor_name`` is added (who, as text that outlives users, and the name of the automation
that acted: an API token, an alert); rows before it keep it empty, since an automation's
name was never stored, and show as before ("automation", or the user).

Summaries are left as they are (they are what people read, and closed postmortems print
them). Reversing keeps the data: the keys are harmless to the code before this.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.db import migrations, models

BATCH = 2000

_ALARM = re.compile(r"^Alarm (firing|clear)\b(?::\s*(\S+) against (\S+))?")
_DECISION = re.compile(r"^(confirm|eliminate|reopen) (\S+?):")
_FIX = re.compile(r"^Applied (\S+) for (\S+)")
_SUGGESTION = re.compile(r"^Evidence suggests (confirm|eliminate|inconclusive) (\S+)")
_VERIFICATION = re.compile(r"^Verification of \S+ (pending|passing|failing)\b")


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def recovered(kind: str, summary: str, data: Mapping[str, Any], inv: Mapping[str, Any]) -> dict:
    """The event's data with what its summary and investigation tell filled in (pure).

    ``inv`` holds the investigation's ``opened_by_name``, ``symptom``, ``root_cause`` and
    ``closing_facts``."""
    found: dict[str, Any] = {}
    if kind == "alarm" and (m := _ALARM.match(summary)):
        found = {"firing": m[1] == "firing"}
        if (measured := _number(m[2])) is not None:
            found["measured"] = measured
        if (threshold := _number(m[3])) is not None:
            found["threshold"] = threshold
    elif kind == "opened":
        name = inv.get("opened_by_name") or (
            summary.rsplit(" by ", 1)[1] if " by " in summary else ""
        )
        found = {"symptom": inv.get("symptom", "")} | ({"opened_by": name} if name else {})
    elif kind == "decision" and (m := _DECISION.match(summary)):
        found = {"action": m[1], "node": m[2]}
    elif kind == "fix" and (m := _FIX.match(summary)):
        found = {"key": m[1], "node": m[2]}
    elif kind == "closed":
        found = {
            "override": summary.startswith("Closed with override"),
            "root_cause": inv.get("root_cause", ""),
        }
        state = ((inv.get("closing_facts") or {}).get("verification") or {}).get("state")
        if state:
            found["verification"] = state
    elif kind == "suggestion" and (m := _SUGGESTION.match(summary)):
        found = {"suggestion": m[1], "node": m[2]}
    elif kind == "verification" and (m := _VERIFICATION.match(summary)):
        found = {"state": m[1]}
    return {**found, **data}


def backfill(apps, schema_editor):
    TimelineEvent = apps.get_model("investigations", "TimelineEvent")
    rows = TimelineEvent.objects.select_related("investigation").order_by("pk")
    changed = []
    for event in rows.iterator(chunk_size=BATCH):
        inv = event.investigation
        facts = {
            "opened_by_name": inv.opened_by_name,
            "symptom": inv.symptom,
            "root_cause": inv.root_cause,
            "closing_facts": inv.closing_facts,
        }
        data = recovered(event.kind, event.summary, event.data or {}, facts)
        if data != (event.data or {}):
            event.data = data
            changed.append(event)
        if len(changed) >= BATCH:
            TimelineEvent.objects.bulk_update(changed, ["data"])
            changed = []
    if changed:
        TimelineEvent.objects.bulk_update(changed, ["data"])


class Migration(migrations.Migration):
    dependencies = [
        ("investigations", "0011_freeze_existing_records"),
    ]

    operations = [
        migrations.AlterField(
            model_name="timelineevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("opened", "Opened"),
                    ("decision", "Decision"),
                    ("fix", "Fix"),
                    ("closed", "Closed"),
                    ("alarm", "Alarm"),
                    ("suggestion", "Suggestion"),
                    ("verification", "Verification"),
                    ("alert", "Alert"),
                    ("artifact", "Artifact"),
                ],
                max_length=32,
            ),
        ),
        migrations.AddField(
            model_name="timelineevent",
            name="actor_name",
            field=models.CharField(
                blank=True,
                help_text="Who, as text that outlives users: a username, or the automation "
                "that acted (an API token by name, an alert, the automatic rule). Empty on rows "
                "written before it was stored.",
                max_length=200,
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
