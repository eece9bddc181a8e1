"""Freeze what can be frozen of investigations recorded before records were frozen.

Every investigation without ``playbook_facts`` gets those of the playbook file shipped
now (``playbook_facts["source"] = "migration"``): its version may be later than the one
it opened with, which was never stored, but no later edit rewrites it again. Every closed
one without ``closing_facts`` gets ``frozen.migrated_closing_facts``: the verdict its
close audit entry recorded, the time since its fix, the gate's alert rule, and the
threshold its alarm events carried. What cannot be frozen, because it was never stored:
the verification's criteria and measured values (shown as an empty table), the gate's
backtest (not shown), and the chart's series (left null: the postmortem reads them from
the stored observations, as before, while retention keeps them).

This migration reads the playbook files and ``investigations.frozen`` as they are when it
runs; reversing it keeps the columns and empties them.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import migrations


def freeze(apps, schema_editor):
    from investigations import frozen
    from investigations.gate import alert_rule
    from investigations.playbook import PlaybookError, get_playbook

    Investigation = apps.get_model("investigations", "Investigation")
    AuditEntry = apps.get_model("audit", "AuditEntry")
    for inv in Investigation.objects.filter(playbook_facts={}).iterator():
        try:
            playbook = get_playbook(inv.symptom)
        except PlaybookError:
            continue  # a symptom no playbook describes any more: nothing to freeze
        inv.playbook_version = playbook.version
        inv.playbook_digest = playbook.digest
        inv.playbook_facts = {**frozen.playbook_facts(playbook), "source": "migration"}
        inv.save(update_fields=["playbook_version", "playbook_digest", "playbook_facts"])
    for inv in Investigation.objects.filter(status="closed", closing_facts={}).iterator():
        if inv.closed_at is None or not inv.playbook_facts:
            continue
        record = inv.fixes.order_by("-applied_at").first()
        fix = rule = None
        if record is not None:
            fix = {"node": record.node, "applied_at": record.applied_at}
            try:
                node = get_playbook(inv.symptom).node(record.node)
                rule = alert_rule(
                    node, record.parameters, investigation_url="", investigation_id=str(inv.pk)
                )
            except (KeyError, ValueError):
                rule = None  # the cause, or its alert, is gone from the playbook
        closing = (
            AuditEntry.objects.filter(
                investigation_id=inv.pk,
                action__in=["investigation.close", "investigation.close_override"],
            )
            .order_by("-pk")
            .first()
        )
        state = str((closing.data or {}).get("verification", "")) if closing else ""
        if not state:
            state = "unknown" if inv.close_override else "passing"
        alarm = (
            inv.timeline.filter(kind="alarm", at__lte=inv.closed_at + timedelta(seconds=1))
            .order_by("-at", "-pk")
            .first()
        )
        threshold = (alarm.data or {}).get("threshold") if alarm else None
        inv.closing_facts = frozen.migrated_closing_facts(
            opened_at=inv.opened_at,
            closed_at=inv.closed_at,
            playbook=inv.playbook_facts,
            fix=fix,
            verification_state=state,
            alarm_threshold=threshold if isinstance(threshold, int | float) else None,
            rule=rule,
        )
        inv.save(update_fields=["closing_facts"])


def unfreeze(apps, schema_editor):
    Investigation = apps.get_model("investigations", "Investigation")
    Investigation.objects.filter(closing_facts__source="migration").update(closing_facts={})
    Investigation.objects.filter(playbook_facts__source="migration").update(
        playbook_facts={}, playbook_version=None, playbook_digest=""
    )


class Migration(migrations.Migration):
    dependencies = [
        ("investigations", "0010_frozen_record"),
        ("audit", "0004_deployment_actions"),
    ]

    operations = [migrations.RunPython(freeze, unfreeze)]
