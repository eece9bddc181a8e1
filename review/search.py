"""Finding past investigations: full-text search on PostgreSQL (ranked, stemmed,
highlighted), plain case-insensitive substring search elsewhere, filters on both.

``full_text`` is a parameter rather than a check inside, so the fallback is tested on
PostgreSQL too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db.models import F, Q, QuerySet
from django.utils.safestring import SafeString

from investigations import access as investigation_access
from review import text
from review.indexing import SEARCH_CONFIG
from review.models import SearchDocument

QUERY_MAX_CHARS = 200
MAX_TERMS = 12
NO_ROOT_CAUSE = "none"
_TERM = re.compile(r'[^\s"]+')
_TOKEN = re.compile(r'"[^"]*"|[^\s"]+')
_DASHES = re.compile(r"-{2,}")


@dataclass(frozen=True)
class Filters:
    symptom: str = ""
    deployment: str = ""
    root_cause: str = ""  # a cause key, NO_ROOT_CAUSE, or "" for any
    status: str = ""
    kind: str = ""  # "drill", "real" or "" for both
    opened_from: date | None = None
    opened_to: date | None = None


def terms(query: str) -> list[str]:
    """The words of a query for the substring fallback: quotes and the websearch minus
    and ``or`` operators dropped, at most MAX_TERMS words."""
    words = [w.lstrip("-") for w in _TERM.findall(query[:QUERY_MAX_CHARS])]
    return [w for w in words if w and w.lower() != "or"][:MAX_TERMS]


def websearch_text(query: str) -> str:
    """The query as PostgreSQL's websearch syntax should see it: quoted phrases, words with
    at most one leading minus, ``or``; at most MAX_TERMS of them. websearch_to_tsquery
    accepts anything, but a run of minus signs overflows its stack (an error, not a
    result)."""
    out: list[str] = []
    for token in _TOKEN.findall(query[:QUERY_MAX_CHARS]):
        if token.startswith('"'):
            phrase = token.strip('"').strip()
            if phrase:
                out.append(f'"{phrase}"')
            continue
        word = _DASHES.sub("-", token.lstrip("-"))
        if not word.strip("-"):
            continue
        if word.lower() == "or":
            out.append("or")
        else:
            out.append(("-" if token.startswith("-") else "") + word)
    return " ".join(out[:MAX_TERMS])


def filtered(queryset: QuerySet, filters: Filters) -> QuerySet:
    if filters.symptom:
        queryset = queryset.filter(symptom=filters.symptom)
    if filters.deployment:
        queryset = queryset.filter(deployment_id=filters.deployment)
    if filters.root_cause == NO_ROOT_CAUSE:
        queryset = queryset.filter(root_cause="")
    elif filters.root_cause:
        queryset = queryset.filter(root_cause=filters.root_cause)
    if filters.status:
        queryset = queryset.filter(status=filters.status)
    if filters.kind:
        queryset = queryset.filter(is_drill=filters.kind == "drill")
    # Whole UTC days, as a range on the column so its index can serve it.
    if filters.opened_from:
        queryset = queryset.filter(
            opened_at__gte=datetime.combine(filters.opened_from, time(), UTC)
        )
    if filters.opened_to:
        end = datetime.combine(filters.opened_to + timedelta(days=1), time(), UTC)
        queryset = queryset.filter(opened_at__lt=end)
    return queryset


def search(queryset: QuerySet, query: str, *, full_text: bool) -> QuerySet:
    """Investigations matching ``query``, best first (newest first without a query)."""
    query = query.strip()[:QUERY_MAX_CHARS]
    if not query:
        return queryset.order_by("-opened_at", "pk")
    if full_text:
        words = websearch_text(query)
        if not words:
            return queryset.none()
        ts_query = SearchQuery(words, search_type="websearch", config=SEARCH_CONFIG)
        return (
            queryset.filter(search_document__vector=ts_query)
            .annotate(rank=SearchRank(F("search_document__vector"), ts_query))
            .order_by("-rank", "-opened_at", "pk")
        )
    words = terms(query)
    if not words:
        return queryset.none()
    for word in words:
        queryset = queryset.filter(
            Q(search_document__title_text__icontains=word)
            | Q(search_document__cause_text__icontains=word)
            | Q(search_document__body_text__icontains=word)
        )
    return queryset.order_by("-opened_at", "pk")


def excerpts(ids: list, query: str, *, full_text: bool) -> dict[object, SafeString]:
    """Highlighted excerpts of the body for one page of results (one query)."""
    query = query.strip()[:QUERY_MAX_CHARS]
    if not query or not ids:
        return {}
    documents = SearchDocument.objects.filter(pk__in=ids)
    if full_text:
        words = websearch_text(query)
        if not words:
            return {}
        ts_query = SearchQuery(words, search_type="websearch", config=SEARCH_CONFIG)
        headline = SearchHeadline(
            "body_text",
            ts_query,
            config=SEARCH_CONFIG,
            start_sel=text.MARK_START,
            stop_sel=text.MARK_STOP,
            max_words=35,
            min_words=12,
            max_fragments=2,
            fragment_delimiter=" … ",
        )
        rows = documents.annotate(headline=headline).values_list("pk", "headline")
        return {pk: text.render_marked(h) for pk, h in rows if h and text.MARK_START in h}
    words = terms(query)
    rows = documents.values_list("pk", "body_text")
    return {pk: excerpt for pk, body in rows if (excerpt := text.plain_excerpt(body, words))}


def investigations_for(user) -> QuerySet:
    """Every investigation of the user's teams (the same rule as investigations.access)."""
    return investigation_access.visible_to(user)
