"""The postmortem page shows the record: root cause, every eliminated branch with the
evidence it was eliminated on, the fix, its verification and the alert rule."""

from __future__ import annotations

import re

from django.urls import reverse


def _page(client, investigation) -> str:
    response = client.get(reverse("postmortems:detail", args=[investigation.pk]))
    assert response.status_code == 200
    return response.content.decode()


def _section(page: str, css_class: str) -> str:
    match = re.search(rf'<section class="panel {css_class}"[^>]*>(.*?)</section>', page, re.S)
    assert match, css_class
    return match[1]


def test_the_page_renders_the_record(client_for, viewer, incident):
    page = _page(client_for(viewer), incident)
    assert "Postmortem: p95 time to first token over target on atlas-prod" in page
    cause = _section(page, "pm-root-cause")
    assert "The KV cache is full; admission stalls and requests are preempted" in cause
    assert "kv-cache-pressure" in cause and "KV at 94 % with preemptions climbing" in cause
    tree = _section(page, "pm-tree")
    for key, reason in [
        ("router-latency", "Router p95 is 4 ms, far under 20 ms"),
        ("prefill-slow", "Prefill is on budget; the slow part is re-prefill"),
        ("kv-block-leak", "Running requests account for the KV usage"),
    ]:
        node = tree[tree.index(f"<code>{key}</code>") :]
        node = node[: node.index("</div>")]
        assert "eliminated" in node and reason in node
        assert "<table" in node, f"{key}: the frozen evidence is missing"
    router = tree[tree.index("<code>router-latency</code>") :]
    assert "Router forward latency, p95" in router and "0.004" in router and "0.02" in router
    fix = _section(page, "pm-fix")
    assert "fewer-max-num-seqs" in fix and "Rolled max-num-seqs on all four replicas" in fix
    assert "passing" in fix and "p95 TTFT under the target" in fix
    gate = _section(page, "pm-gate")
    assert "AtlasKVCachePressure" in gate and "atlas-regression-gates" in gate
    assert str(incident.pk) in gate  # the rule links back to the investigation
    detection = _section(page, "pm-detection")
    assert "<svg" in detection and "ttft_p95" in detection
    impact = _section(page, "pm-impact")
    assert "16 min 30 s" in impact


def test_the_print_stylesheet_is_linked_for_print(client_for, viewer, incident):
    page = _page(client_for(viewer), incident)
    assert re.search(r'<link rel="stylesheet" href="/static/css/print.css" media="print">', page)


def test_the_investigation_links_to_its_postmortem(client_for, viewer, incident):
    page = client_for(viewer).get(reverse("investigations:detail", args=[incident.pk]))
    assert reverse("postmortems:detail", args=[incident.pk]) in page.content.decode()


def test_viewers_get_no_edit_forms(client_for, viewer, responder, incident):
    assert "Edit the narrative" not in _page(client_for(viewer), incident)
    assert "Edit the narrative" in _page(client_for(responder), incident)


def test_reading_a_postmortem_writes_nothing(client_for, viewer, incident):
    from postmortems.models import Postmortem

    _page(client_for(viewer), incident)
    assert not Postmortem.objects.exists()


def test_an_action_item_is_added_and_closed(client_for, responder, commander, incident):
    from postmortems.models import ActionItem

    client = client_for(responder)
    url = reverse("postmortems:add_action", args=[incident.pk])
    response = client.post(
        url,
        {
            "title": "Alert on KV usage over 90 % with preemptions",
            "type": "detect",
            "owner": commander.username,
            "due": "2026-02-01",
        },
    )
    assert response.status_code == 302
    item = ActionItem.objects.get()
    assert (item.owner, item.created_by, item.status) == (commander, responder, "open")
    client.post(url, {"title": "Capacity review", "type": "prevent", "owner_text": "SRE"})
    page = _page(client, incident)
    actions = _section(page, "pm-actions")
    assert "Alert on KV usage over 90 % with preemptions" in actions
    assert "cora-commander" in actions and "SRE" in actions
    close = reverse("postmortems:close_action", args=[incident.pk, item.pk])
    assert client.post(close).status_code == 302
    item.refresh_from_db()
    assert item.status == "done" and item.closed_by == responder


def test_an_owner_from_another_team_is_refused(client_for, responder, outsider, incident):
    from postmortems.models import ActionItem

    client_for(responder).post(
        reverse("postmortems:add_action", args=[incident.pk]),
        {"title": "Audit", "type": "mitigate", "owner": outsider.username},
    )
    assert not ActionItem.objects.exists()


def test_the_page_has_a_query_budget(
    client_for, responder, incident, django_assert_max_num_queries
):
    from postmortems import actions

    for n in range(20):
        actions.add_action_item(
            investigation=incident, title=f"Item {n}", type="mitigate", user=responder
        )
    client = client_for(responder)
    # Evaluation, verification and the gate read the record; rows add no queries.
    with django_assert_max_num_queries(25):
        assert client.get(reverse("postmortems:detail", args=[incident.pk])).status_code == 200
