"""Done when: search returns the right investigations on a seeded set of 10,000.

10,000 realistic investigations from ``seed_investigations`` (committed once for the
module, removed afterwards), with needles planted in a narrative, a decision reason, a fix
note, a title and a comment. Expected sets come from the relational record (which
decisions name which node, which root cause was recorded), never from the search itself.
PostgreSQL only: this is the full-text path.
"""

from __future__ import annotations

import math
import re
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from investigations.models import Decision, FixRecord, Investigation
from postmortems.models import PostmortemVersion
from review import indexing, search
from review.models import ReviewComment, SearchDocument
from review.seeding import seed
from teams.models import Membership, Role, Team
from tests.conftest import require_service

COUNT = 10_000
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            require_service("PostgreSQL", "the 10,000-investigation search needs PostgreSQL")
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user(username="reviewer-10k", password="x" * 20)
        team = Team.objects.create(name="Seeded for review")
        Membership.objects.create(team=team, user=user, role=Role.COMMANDER)
        started = time.perf_counter()
        result = seed(team_name=team.name, count=COUNT, seed=7)
        seconds = time.perf_counter() - started
        needles = _plant(team, user)
        print(f"\nseeded {COUNT} investigations with search documents in {seconds:.1f} s")
        yield {"team": team, "user": user, "result": result, "needles": needles}
        Investigation.objects.filter(team=team).delete()
        team.delete()
        user.delete()


def _plant(team, user) -> dict:
    """Unique words in chosen investigations, then one batch rebuild of their documents."""
    closed = Investigation.objects.filter(team=team).order_by("opened_at")
    with_narrative = list(closed.filter(postmortem__isnull=False).values_list("pk", flat=True)[:2])
    others = list(closed.filter(postmortem__isnull=True).values_list("pk", flat=True)[:3])
    with_fix = FixRecord.objects.filter(investigation__team=team).order_by("pk").first()
    n = {
        "phrase": with_narrative[0],
        "scattered": with_narrative[1],
        "reason": others[0],
        "title": others[1],
        "comment": others[2],
        "note": with_fix.investigation_id,
    }
    for key, text in (("phrase", "A purple walrus sat on the router."),
                      ("scattered", "The walrus was not purple at all.")):  # fmt: skip
        version = PostmortemVersion.objects.filter(postmortem__investigation_id=n[key]).first()
        PostmortemVersion.objects.create(
            postmortem_id=version.postmortem_id,
            number=version.number + 1,
            sections={**version.sections, "narrative": text},
        )
    decision = Decision.objects.filter(investigation_id=n["reason"]).first()
    Decision.objects.filter(pk=decision.pk).update(
        reason="Node quarantined; heliotrope rack ran hot"
    )
    FixRecord.objects.filter(pk=with_fix.pk).update(note="Defragmented the allocator pool")
    Investigation.objects.filter(pk=n["title"]).update(title="Heliotrope hall brown-out")
    ReviewComment.objects.create(investigation_id=n["comment"], author=user, body="Marmalade!")
    indexing.rebuild(n.values())
    return n


def found(seeded, query, **filters) -> list:
    queryset = search.filtered(search.investigations_for(seeded["user"]), search.Filters(**filters))
    return list(search.search(queryset, query, full_text=True).values_list("pk", flat=True))


def test_every_investigation_has_a_weighted_document(seeded, db):
    docs = SearchDocument.objects.filter(investigation__team=seeded["team"])
    assert docs.count() == COUNT
    assert not docs.filter(vector__isnull=True).exists()
    assert seeded["result"].drills > 0 and seeded["result"].postmortems > 0


def test_planted_needles_are_found_exactly(seeded, db):
    n = seeded["needles"]
    assert found(seeded, '"purple walrus"') == [n["phrase"]]
    assert set(found(seeded, "purple walrus")) == {n["phrase"], n["scattered"]}
    assert found(seeded, "quarantining") == [n["reason"]]  # quarantined -> quarantin
    assert found(seeded, "defragmenting") == [n["note"]]
    assert found(seeded, "marmalade") == [n["comment"]]
    # In a title (weight A) it outranks the same word in a decision reason (weight C).
    assert found(seeded, "heliotrope") == [n["title"], n["reason"]]


def test_leaking_finds_the_leak_root_causes(seeded, db):
    expected = set(
        Investigation.objects.filter(
            team=seeded["team"], root_cause__in=["kv-block-leak", "allocator-leak"]
        ).values_list("pk", flat=True)
    )
    assert len(expected) > 100
    assert set(found(seeded, "leaking")) == expected


def test_a_root_cause_word_ranks_its_root_causes_first(seeded, db):
    team = seeded["team"]
    mentioned = set(
        Decision.objects.filter(investigation__team=team, node="tp-straggler").values_list(
            "investigation_id", flat=True
        )
    )
    roots = set(
        Investigation.objects.filter(team=team, root_cause="tp-straggler").values_list(
            "pk", flat=True
        )
    )
    results = found(seeded, "straggler")
    assert set(results) == mentioned and roots < mentioned
    assert set(results[: len(roots)]) == roots


def test_filters_combine_with_the_search(seeded, db):
    team = seeded["team"]
    since = (timezone.now() - timedelta(days=180)).date()
    expected = set(
        Decision.objects.filter(
            investigation__team=team,
            node="tp-straggler",
            investigation__symptom="itl-spikes",
            investigation__is_drill=False,
            investigation__opened_at__date__gte=since,
        ).values_list("investigation_id", flat=True)
    )
    assert expected
    results = found(
        seeded, "straggler", symptom="itl-spikes", kind="real", status="closed",
        opened_from=since,
    )  # fmt: skip
    assert set(results) == expected
    drills = found(seeded, "straggler", symptom="itl-spikes", kind="drill")
    assert drills and not expected & set(drills)


def test_the_page_counts_and_pages_the_results(
    seeded, db, client_for, django_assert_max_num_queries
):
    client = client_for(seeded["user"])
    params = {"q": "straggler", "symptom": "itl-spikes", "kind": "real"}
    expected = len(found(seeded, "straggler", symptom="itl-spikes", kind="real"))
    pages = math.ceil(expected / 25)
    # Session, user, deployments, count, rows, headlines: none per row.
    with django_assert_max_num_queries(7):
        page = client.get(reverse("review:list"), params).content.decode()
    assert f"{expected} investigations matching" in page
    assert f"Page 1 of {pages}" in page
    assert len(re.findall(r'<tr data-id="', page)) == 25
    assert page.count("<mark>") >= 25  # every row's excerpt marks the word
    last = client.get(reverse("review:list"), {**params, "page": pages}).content.decode()
    assert len(re.findall(r'<tr data-id="', last)) == expected - 25 * (pages - 1)


def test_other_teams_search_the_same_words_and_find_nothing_here(seeded, client_for, outsider):
    page = client_for(outsider).get(reverse("review:list"), {"q": "straggler"}).content.decode()
    assert "0 investigations matching" in page


def test_statistics_over_ten_thousand_take_a_few_queries(
    seeded, db, client_for, django_assert_max_num_queries
):
    client = client_for(seeded["user"])
    # Session, user, teams, membership, then one read for the team's statistics and its
    # drills' apart: investigations, alarm onsets, first actions, confirm decisions,
    # verification passes.
    with django_assert_max_num_queries(9):
        page = client.get(reverse("review:stats")).content.decode()
    drills = seeded["result"].drills
    assert f"({drills} drills left out)" in page
    assert re.search(r"Time to root cause</td><td class=\"num\">\d{4}</td>", page)
