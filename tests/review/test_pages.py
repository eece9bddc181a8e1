"""The review pages over real HTTP requests: who sees what, filters and pages in links,
comments by role, statistics with their definitions, and a query budget."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from investigations import actions
from investigations.models import Decision, Investigation
from review.models import ReviewComment
from tests.review.conftest import closed_incident
from tests.support import builders

ROLES = ["anonymous", "outsider", "viewer", "responder", "commander"]
READ = {"anonymous": 302, "outsider": 404, "viewer": 200, "responder": 200, "commander": 200}
WRITE = {"anonymous": 302, "outsider": 404, "viewer": 403, "responder": 302, "commander": 302}


def _client(client, request, role):
    if role != "anonymous":
        client.force_login(request.getfixturevalue(role))
    return client


@pytest.fixture
def incident(deployment, commander, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return closed_incident(
            deployment, commander, title="Gnu stampede on atlas-prod", reason="gnu herd"
        )


def rows_of(page: str) -> list[str]:
    return re.findall(r'<tr data-id="([0-9a-f-]+)">', page)


@pytest.mark.parametrize("role", ROLES)
def test_reading_the_review_of_an_investigation(client, request, incident, role):
    response = _client(client, request, role).get(reverse("review:detail", args=[incident.pk]))
    assert response.status_code == READ[role]
    if role == "anonymous":
        assert response["Location"].startswith(reverse("login"))
    elif role != "outsider":
        assert "gnu herd" in response.content.decode()


@pytest.mark.parametrize("role", ROLES)
def test_commenting(client, request, incident, role, django_capture_on_commit_callbacks):
    url = reverse("review:comment", args=[incident.pk])
    with django_capture_on_commit_callbacks(execute=True):
        response = _client(client, request, role).post(url, {"body": "Alert on <gc> time"})
    assert response.status_code == WRITE[role]
    created = ReviewComment.objects.filter(investigation=incident)
    if WRITE[role] == 302 and role != "anonymous":
        assert created.get().author == request.getfixturevalue(role)
        page = client.get(reverse("review:detail", args=[incident.pk])).content.decode()
        assert "Alert on &lt;gc&gt; time" in page  # escaped, never markup
        assert "Alert on <gc> time" in incident.search_document.body_text
    else:
        assert not created.exists()
    if role == "anonymous":
        assert response["Location"].startswith(reverse("login"))


def test_viewers_get_no_comment_form(client_for, viewer, incident):
    page = client_for(viewer).get(reverse("review:detail", args=[incident.pk])).content.decode()
    assert 'name="body"' not in page and "Viewers read comments" in page


def test_a_comment_over_the_bound_is_refused_and_kept(client_for, responder, incident):
    response = client_for(responder).post(
        reverse("review:comment", args=[incident.pk]), {"body": "x" * 4001}
    )
    assert response.status_code == 400
    assert not ReviewComment.objects.exists()
    assert "x" * 4001 in response.content.decode()  # their text stays in the form


def test_the_list_needs_a_login(client):
    response = client.get(reverse("review:list"))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_outsiders_see_nothing_of_another_team(client_for, outsider, incident):
    client = client_for(outsider)
    for params in ({}, {"q": "gnu"}, {"deployment": str(incident.deployment_id)}):
        page = client.get(reverse("review:list"), params).content.decode()
        assert rows_of(page) == [] and "Gnu stampede" not in page
    # Another team's deployment is not even a choice.
    page = client.get(reverse("review:list"), {"deployment": str(incident.deployment_id)})
    assert "Select a valid choice" in page.content.decode()


def test_members_find_by_search_and_see_the_excerpt(client_for, viewer, incident):
    page = client_for(viewer).get(reverse("review:list"), {"q": "herd"}).content.decode()
    assert rows_of(page) == [str(incident.pk)]
    assert "<mark>herd</mark>" in page


def test_pages_keep_the_filters_and_the_query_budget_holds(
    client_for, commander, deployment, django_assert_max_num_queries
):
    ids = [
        actions.open_investigation(
            deployment=deployment, symptom="itl-spikes", user=commander, title=f"Spike {n}"
        ).pk
        for n in range(30)
    ]
    actions.open_investigation(deployment=deployment, symptom="gpu-oom", user=commander)
    Investigation.objects.filter(pk__in=ids[:3]).update(is_drill=True)
    client = client_for(commander)
    params = {"symptom": "itl-spikes", "status": "open", "kind": "real"}
    # Session, user, deployments (filter choices), count, rows: constant in the rows.
    with django_assert_max_num_queries(6):
        first = client.get(reverse("review:list"), params).content.decode()
    assert "27 investigations" in first and len(rows_of(first)) == 25
    assert "Page 1 of 2" in first
    link = re.search(r'href="([^"]+)" rel="next"', first).group(1).replace("&amp;", "&")
    assert "symptom=itl-spikes" in link and "kind=real" in link and "page=2" in link
    second = client.get(reverse("review:list") + link).content.decode()
    assert len(rows_of(second)) == 2 and "Page 2 of 2" in second
    assert set(rows_of(first) + rows_of(second)) == {str(pk) for pk in ids[3:]}


def test_bad_filters_are_reported_and_ignored(client_for, commander, incident):
    response = client_for(commander).get(
        reverse("review:list"),
        {"q": "x" * 5000, "opened_from": "not a date", "root_cause": "bogus", "page": "999"},
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert page.count("(ignored)") == 3
    assert rows_of(page) == [str(incident.pk)]  # last page of one


def test_statistics_state_their_definitions_and_leave_drills_out(
    client_for, viewer, commander, deployment, django_capture_on_commit_callbacks
):
    real = closed_incident(deployment, commander, title="real", root="gc-pauses")
    drill = closed_incident(deployment, commander, title="drill", root="gc-pauses", drill=True)
    opened = real.opened_at
    Decision.objects.filter(investigation=real, action="confirm").update(
        decided_at=opened + timedelta(minutes=12)
    )
    Investigation.objects.filter(pk=real.pk).update(closed_at=opened + timedelta(minutes=75))
    Investigation.objects.filter(pk=drill.pk).update(closed_at=drill.opened_at)
    page = client_for(viewer).get(reverse("review:stats")).content.decode()
    assert "Drills are excluded" in page and "(1 drill left out)" in page
    durations = page.split('data-testid="durations"')[1].split("</table>")[0]
    assert "12 min 00 s" in durations and "1 h 15 min" in durations
    by_cause = page.split('data-testid="by-root-cause"')[1].split("</table>")[0]
    assert "gc-pauses" in by_cause and '<td class="num">1</td>' in by_cause
    assert "nearest-rank" in page and "turned passing before the close" in page


def test_statistics_of_another_team_are_not_found(client_for, viewer, other_team):
    client = client_for(viewer)
    assert client.get(reverse("review:stats"), {"team": other_team.pk}).status_code == 404
    assert client.get(reverse("review:stats"), {"team": "not-a-uuid"}).status_code == 404


def test_statistics_without_a_team(client_for, django_user_model):
    lonely = django_user_model.objects.create_user(username="lonely", password="x" * 20)
    page = client_for(lonely).get(reverse("review:stats")).content.decode()
    assert "not a member of any team" in page


def test_statistics_pick_among_several_teams(client_for, commander, other_team):
    from teams.models import Membership

    Membership.objects.create(team=other_team, user=commander, role="viewer")
    builders.deployment(other_team, "x")
    page = client_for(commander).get(reverse("review:stats"), {"team": other_team.pk})
    assert f'<option value="{other_team.pk}" selected>' in page.content.decode()


def test_statistics_show_acknowledge_severity_and_weekly_trends_without_drills(
    client_for, viewer, commander, deployment, django_capture_on_commit_callbacks
):
    import json

    real = closed_incident(deployment, commander, title="real", root="gc-pauses")
    drill = closed_incident(deployment, commander, title="drill", root="gc-pauses", drill=True)
    Investigation.objects.filter(pk=real.pk).update(severity="sev2")
    Investigation.objects.filter(pk=drill.pk).update(severity="sev1")
    page = client_for(viewer).get(reverse("review:stats")).content.decode()
    durations = page.split('data-testid="durations"')[1].split("</table>")[0]
    # Opened by a person: acknowledged when it opened, before any alarm.
    assert 'Time to acknowledge</td><td class="num">1</td><td class="num">0 s' in durations
    assert "DORA" in durations
    by_severity = page.split('data-testid="by-severity"')[1].split("</table>")[0]
    assert "SEV2" in by_severity and "SEV1" not in by_severity  # the drill's is left out
    assert "From the alarm's onset to the first responder action" in page
    assert "Monday 00:00 UTC" in page
    trends = page.split('data-testid="trends"')[1].split("</section>")[0]
    figure = json.loads(
        re.search(r'id="stats-severity-data" type="application/json">(.*?)</script>', trends, re.S)[
            1
        ]
    )
    assert [(t["name"], sum(t["y"])) for t in figure["data"]] == [("SEV2", 1)]
    assert 'data-chart="stats-durations-data"' in trends
    # Drawn by the site's own scripts (no inline script: the CSP allows none).
    assert "vendor/plotly/plotly" in page and "js/charts.js" in page
    assert "<script>" not in page


def test_drills_have_their_own_numbers_kept_apart(
    client_for, viewer, commander, deployment, django_capture_on_commit_callbacks
):
    real = closed_incident(deployment, commander, title="real", root="gc-pauses")
    drill = closed_incident(deployment, commander, title="drill", root="gc-pauses", drill=True)
    Investigation.objects.filter(pk=real.pk).update(closed_at=real.opened_at + timedelta(hours=2))
    Investigation.objects.filter(pk=drill.pk).update(
        closed_at=drill.opened_at + timedelta(minutes=7)
    )
    page = client_for(viewer).get(reverse("review:stats")).content.decode()
    durations = page.split('data-testid="durations"')[1].split("</table>")[0]
    drills = page.split('data-testid="drills"')[1].split("</section>")[0]
    assert "1 finished drill alone" in drills
    assert "7 min 00 s" in drills and "2 h 00 min" not in drills
    assert "2 h 00 min" in durations and "7 min 00 s" not in durations


@pytest.mark.parametrize(
    ("events", "expected_s"),
    [
        ([], 0),  # opened by a person, no alarm: acknowledged when opened
        ([("alarm", {"firing": True}, -3)], 180),
        ([("alarm", {"firing": False}, -10), ("alarm", {"firing": True}, -3)], 180),
        ([("alert", {"status": "firing"}, -5), ("alarm", {"firing": True}, -3)], 300),
        ([("alert", {"status": "resolved"}, -8)], 0),
    ],
)
def test_the_onset_is_read_from_firing_events_in_the_database(
    commander, deployment, events, expected_s, frozen_now, django_capture_on_commit_callbacks
):
    from investigations.models import TimelineEvent
    from review import records

    real = closed_incident(deployment, commander, title="real")
    for kind, data, minutes in events:
        event = TimelineEvent.objects.create(investigation=real, kind=kind, summary=kind, data=data)
        TimelineEvent.objects.filter(pk=event.pk).update(
            at=real.opened_at + timedelta(minutes=minutes)
        )
    statistics, _ = records.team_statistics(real.team_id)
    assert statistics.time_to_acknowledge.median_s == expected_s
