"""The review pages. Thin: authorise through the access modules, read through
``review.search`` / ``review.records``, render."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from deployments import access as deployment_access
from investigations.access import get_investigation
from investigations.causes import CAUSES
from investigations.choices import Severity
from review import actions, charts, indexing, records, search, stats
from review.forms import CommentForm, ReviewFilterForm
from teams.access import get_team, teams_of
from teams.models import Membership, Role

PAGE_SIZE = 25


@require_GET
def review_list(request: HttpRequest) -> HttpResponse:
    deployments = list(deployment_access.visible_to(request.user).order_by("team__name", "name"))
    form = ReviewFilterForm(request.GET or None, deployments=deployments)
    if form.is_bound:
        form.is_valid()
    query = form.query()
    full_text = indexing.uses_full_text()
    found = search.search(
        search.filtered(search.investigations_for(request.user), form.filters()),
        query,
        full_text=full_text,
    )
    found = found.select_related("deployment").only(
        "pk",
        "title",
        "symptom",
        "status",
        "incident_status",
        "severity",
        "is_drill",
        "opened_at",
        "closed_at",
        "root_cause",
        "deployment__name",
    )
    page = Paginator(found, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = list(page.object_list)
    highlights = search.excerpts([r.pk for r in rows], query, full_text=full_text)
    return render(
        request,
        "review/list.html",
        {
            "form": form,
            "page": page,
            "rows": [(r, highlights.get(r.pk)) for r in rows],
            "query": query,
            "full_text": full_text,
            "filtered": bool(
                form.is_bound and any(v for k, v in request.GET.items() if k != "page")
            ),
        },
    )


def _can_comment(user, investigation) -> bool:
    return Membership.objects.filter(
        team_id=investigation.team_id, user=user, role__in=[Role.COMMANDER, Role.RESPONDER]
    ).exists()


def _detail(request: HttpRequest, investigation, form: CommentForm | None, status: int = 200):
    can_comment = _can_comment(request.user, investigation)
    return render(
        request,
        "review/detail.html",
        {
            "investigation": investigation,
            "cause_description": CAUSES.get(investigation.root_cause, ""),
            "decisions": records.decisions_of(investigation),
            "fixes": records.fixes_of(investigation),
            "comments": records.comments_of(investigation),
            "can_comment": can_comment,
            "form": (form or CommentForm()) if can_comment else None,
        },
        status=status,
    )


@require_GET
def review_detail(request: HttpRequest, investigation_id) -> HttpResponse:
    return _detail(request, get_investigation(request.user, investigation_id), None)


@require_POST
def add_comment(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    form = CommentForm(request.POST)
    if not form.is_valid():
        return _detail(request, investigation, form, status=400)
    actions.add_comment(
        investigation=investigation, user=request.user, body=form.cleaned_data["body"]
    )
    messages.success(request, "Comment added.")
    return redirect(reverse("review:detail", args=[investigation.pk]) + "#comments")


@require_GET
def team_stats(request: HttpRequest) -> HttpResponse:
    teams = list(teams_of(request.user))
    team_id = request.GET.get("team") or (teams[0].pk if teams else None)
    try:
        team = get_team(request.user, uuid.UUID(str(team_id))) if team_id else None
    except ValueError:
        raise Http404 from None
    statistics, drills = records.team_statistics(team.pk) if team else (None, None)
    return render(
        request,
        "review/stats.html",
        {
            "teams": teams,
            "team": team,
            "stats": statistics,
            "fmt": _formatted(statistics) if statistics else {},
            "drills": drills if drills and drills.closed else None,
            "drills_fmt": _formatted(drills) if drills else {},
            "by_cause": [(c, n, CAUSES.get(c, "")) for c, n in statistics.by_root_cause]
            if statistics
            else [],
            "by_severity": [(_severity_label(s), n) for s, n in statistics.by_severity]
            if statistics
            else [],
            "figures": {
                "severity": charts.by_severity(statistics.weeks, _severity_label),
                "cause": charts.by_root_cause(statistics.weeks),
                "durations": charts.durations(statistics.weeks),
            }
            if statistics and statistics.weeks
            else None,
        },
    )


def _severity_label(value: str) -> str:
    try:
        return Severity(value).label
    except ValueError:
        return value or "not set"


def _formatted(statistics: stats.TeamStatistics) -> dict[str, str]:
    f = stats.format_duration
    return {
        "tta_median": f(statistics.time_to_acknowledge.median_s),
        "tta_p90": f(statistics.time_to_acknowledge.p90_s),
        "ttrc_median": f(statistics.time_to_root_cause.median_s),
        "ttrc_p90": f(statistics.time_to_root_cause.p90_s),
        "fix_median": f(statistics.time_to_verified_fix.median_s),
        "fix_p90": f(statistics.time_to_verified_fix.p90_s),
    }
