"""Both search paths on a handful of investigations: the substring fallback (what SQLite
uses; exercised on any database) and PostgreSQL full text (ranked, stemmed)."""

from __future__ import annotations

import pytest

from investigations.models import Investigation
from review import actions as review_actions
from review import search
from tests.review.conftest import closed_incident
from tests.support import builders


@pytest.fixture
def incidents(deployment, commander, other_team, outsider, django_capture_on_commit_callbacks):
    theirs = builders.deployment(other_team, "their-prod")
    with django_capture_on_commit_callbacks(execute=True):
        made = {
            "title": closed_incident(
                deployment, commander, title="Heliotrope cluster slow", reason="ordinary"
            ),
            "reason": closed_incident(
                deployment, commander, title="ITL spikes", reason="heliotrope rack was hot",
                root="gpu-throttling",
            ),
            "leak": closed_incident(
                deployment, commander, title="OOM", symptom="gpu-oom", root="kv-block-leak",
                reason="Blocks leaking after aborted requests",
            ),
            "narrative": closed_incident(
                deployment, commander, title="TTFT", symptom="high-ttft",
                root="kv-cache-pressure", narrative="A purple walrus sat on the router.",
            ),
            "scattered": closed_incident(
                deployment, commander, title="TTFT again", symptom="high-ttft",
                root="kv-cache-pressure", narrative="The walrus was not purple.",
            ),
            "theirs": closed_incident(
                theirs, outsider, title="Heliotrope at another org", reason="heliotrope walrus"
            ),
        }  # fmt: skip
        review_actions.add_comment(
            investigation=made["title"], user=commander, body="Marmalade-coloured dashboards"
        )
    return made


def found(user, query, *, full_text, **filters):
    queryset = search.filtered(search.investigations_for(user), search.Filters(**filters))
    return list(search.search(queryset, query, full_text=full_text).values_list("pk", flat=True))


def ids(incidents, *names):
    return [incidents[n].pk for n in names]


def test_fallback_matches_substrings_case_insensitively_all_words(incidents, commander):
    assert set(found(commander, "HELIOTROPE", full_text=False)) == set(
        ids(incidents, "title", "reason")
    )
    assert found(commander, "purple walrus", full_text=False) in (
        ids(incidents, "narrative", "scattered"),
        ids(incidents, "scattered", "narrative"),
    )
    assert found(commander, "marmalade", full_text=False) == ids(incidents, "title")
    # No stemming: a form that is not in the text finds nothing; a prefix does.
    assert found(commander, "leaks", full_text=False) == []
    assert found(commander, "leak", full_text=False) == ids(incidents, "leak")
    # Operators and quotes are dropped, not interpreted; nothing left finds nothing.
    assert found(commander, '"" -', full_text=False) == []


def test_fallback_respects_teams_and_filters(incidents, commander, outsider):
    assert found(outsider, "heliotrope", full_text=False) == ids(incidents, "theirs")
    assert found(commander, "heliotrope", full_text=False, root_cause="gpu-throttling") == ids(
        incidents, "reason"
    )
    assert found(commander, "", full_text=False, symptom="high-ttft") == ids(
        incidents, "scattered", "narrative"
    )  # newest first without a query


def test_filters_cover_status_kind_dates_and_no_root_cause(incidents, commander, deployment):
    from datetime import timedelta

    from django.utils import timezone

    from investigations import actions

    still_open = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )
    Investigation.objects.filter(pk=incidents["leak"].pk).update(is_drill=True)
    past = timezone.now() - timedelta(days=40)
    Investigation.objects.filter(pk=incidents["title"].pk).update(opened_at=past)
    assert found(commander, "", full_text=False, status="open") == [still_open.pk]
    assert found(commander, "", full_text=False, root_cause=search.NO_ROOT_CAUSE) == [still_open.pk]
    assert found(commander, "", full_text=False, kind="drill") == ids(incidents, "leak")
    assert incidents["leak"].pk not in found(commander, "", full_text=False, kind="real")
    day = past.date()
    assert found(commander, "", full_text=False, opened_from=day, opened_to=day) == ids(
        incidents, "title"
    )
    assert incidents["title"].pk not in found(
        commander, "", full_text=False, opened_from=day + timedelta(days=1)
    )
    assert (
        found(commander, "", full_text=False, deployment=str(incidents["theirs"].deployment_id))
        == []
    )


def test_full_text_stems_ranks_and_reads_websearch_syntax(postgres, incidents, commander):
    # "leaking" and "leaks" both stem to "leak".
    assert found(commander, "leaks", full_text=True) == ids(incidents, "leak")
    # The title (weight A) outranks a decision reason (weight C).
    assert found(commander, "heliotrope", full_text=True) == ids(incidents, "title", "reason")
    # A quoted phrase needs its words adjacent, in order.
    assert found(commander, '"purple walrus"', full_text=True) == ids(incidents, "narrative")
    assert found(commander, "walrus -router", full_text=True) == ids(incidents, "scattered")
    # The root cause (weight B) is searchable by its words and its description.
    assert found(commander, "throttling", full_text=True) == ids(incidents, "reason")
    assert found(commander, "marmalade", full_text=True) == ids(incidents, "title")
    assert found(commander, "heliotrope walrus", full_text=True) == []  # theirs is not ours


def test_queries_are_cleaned_for_websearch():
    assert search.websearch_text('kv  "cache full"  -leak or ---gc "" --') == (
        'kv "cache full" -leak or -gc'
    )
    assert search.websearch_text("a--------b") == "a-b"
    assert search.websearch_text(" ".join(f"w{i}" for i in range(50))).count(" ") == 11
    assert search.websearch_text("-" * 500) == ""


HOSTILE_QUERIES = [
    "&|!:*()'",
    "a <-> b",
    "\\",
    "'; DROP TABLE x; --",
    "or or or",
    "the",
    "-" * 300,  # overflows websearch_to_tsquery's stack unless cleaned first
    "zz " + "-" * 150 + "qq",
    "zz" + "-" * 150,
    '"' + "zz " * 80 + '"',
    "ü" * 50,
]


def test_hostile_queries_find_nothing_quietly(postgres, incidents, commander):
    for query in HOSTILE_QUERIES:
        assert found(commander, query, full_text=True) == [], query
        assert search.excerpts(ids(incidents, "title"), query, full_text=True) == {}, query


def test_hostile_queries_on_the_fallback_stay_within_the_team(incidents, commander):
    theirs = incidents["theirs"].pk
    for query in [*HOSTILE_QUERIES, "%", "_", "heliotrope %_"]:
        results = found(commander, query, full_text=False)
        assert theirs not in results, query
        search.excerpts(results, query, full_text=False)  # renders without error
    # LIKE wildcards are literal text: "%" matches only a literal percent sign.
    assert found(commander, "%", full_text=False) == []


def test_fallback_excerpts_mark_the_words_found(incidents):
    pk = incidents["leak"].pk
    assert "<mark>leak</mark>ing" in search.excerpts([pk], "leak", full_text=False)[pk]


def test_full_text_excerpts_mark_the_stemmed_matches(postgres, incidents):
    pk = incidents["leak"].pk
    assert "<mark>leaking</mark>" in search.excerpts([pk], "leaks", full_text=True)[pk]
