"""The team page lists the open action items of all its postmortems, overdue first and
flagged; done ones are counted, not listed; another team's never appear."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse

from investigations import actions as investigation_actions
from postmortems import actions


def test_open_items_across_investigations_with_overdue_flagged(
    client_for, viewer, responder, commander, incident, other_team, frozen_now, make_deployment
):
    today = frozen_now.date()
    second = investigation_actions.open_investigation(
        deployment=incident.deployment, symptom="gpu-oom", user=commander, title="OOM on r2"
    )
    add = actions.add_action_item
    add(investigation=incident, title="Runbook for KV", type="process", due=today, user=responder)
    add(
        investigation=second,
        title="Cap batch size",
        type="prevent",
        priority="p0",
        due=today - timedelta(days=3),
        user=responder,
    )
    done = add(investigation=second, title="Restart r2", type="mitigate", user=responder)
    actions.close_action_item(item=done, user=responder)
    theirs = investigation_actions.open_investigation(
        deployment=make_deployment("theirs", team=other_team), symptom="gpu-oom", user=None
    )
    add(investigation=theirs, title="Not ours", type="detect", user=None)

    page = client_for(viewer).get(reverse("teams:detail", args=[incident.team_id]))
    text = page.content.decode()
    panel = text.split('data-testid="team-action-items"')[1].split("</section>")[0]
    assert "2 open, <strong>1 overdue</strong>, 1 done" in panel
    assert panel.index("Cap batch size") < panel.index("Runbook for KV")  # overdue first
    late_row = panel[panel.index("Cap batch size") :].split("</tr>")[0]
    assert "overdue" in late_row and "P0" in late_row
    assert "overdue" not in panel[panel.index("Runbook for KV") :].split("</tr>")[0]
    assert "OOM on r2" in panel and "Restart r2" not in panel and "Not ours" not in panel
    assert reverse("postmortems:detail", args=[second.pk]) + "#action-items" in panel
