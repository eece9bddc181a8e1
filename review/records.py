"""Reading what the review pages show: a few queries each, never one per investigation."""

from __future__ import annotations

from django.db.models import Case, Min, Q, Value, When

from investigations.choices import EventKind, VerificationState
from investigations.models import Decision, Investigation, TimelineEvent
from review import stats
from review.models import ReviewComment


def team_statistics(team_id, *, drills: bool = False) -> stats.TeamStatistics:
    """Five queries: the team's investigations (drills included, so the page can say how
    many were left out), the confirm decisions on the closed real ones, their passing
    verifications, and per investigation its first alarm or alert firing and its first
    event a person wrote (aggregated in the database: one row per investigation).

    ``drills=True``: the same statistics of the team's drills alone, kept apart (each drill
    is then measured as if it were real; no real investigation is in them)."""
    investigations = Investigation.objects.filter(team_id=team_id)
    if drills:
        investigations = investigations.filter(is_drill=True)
    rows = investigations.annotate(
        overridden=Case(When(close_override="", then=Value(False)), default=Value(True))
    ).values_list(
        "pk", "opened_at", "closed_at", "root_cause", "is_drill", "overridden", "severity"
    )

    events = TimelineEvent.objects.filter(
        investigation__team_id=team_id,
        investigation__is_drill=drills,
        investigation__status=Investigation.Status.CLOSED,
    )
    onsets = (
        events.filter(
            Q(kind=EventKind.ALARM, data__firing=True)
            | Q(kind=EventKind.ALERT, data__status="firing")
        )
        .values("investigation_id")
        .annotate(first=Min("at"))
        .values_list("investigation_id", "first")
    )
    first_actions = (
        events.filter(actor__isnull=False)
        .values("investigation_id")
        .annotate(first=Min("at"))
        .values_list("investigation_id", "first")
    )
    confirms = Decision.objects.filter(
        investigation__team_id=team_id,
        investigation__is_drill=drills,
        investigation__status=Investigation.Status.CLOSED,
        action=Decision.Action.CONFIRM,
    ).values_list("investigation_id", "node", "decided_at")
    verified = TimelineEvent.objects.filter(
        investigation__team_id=team_id,
        investigation__is_drill=drills,
        investigation__status=Investigation.Status.CLOSED,
        kind=EventKind.VERIFICATION,
        data__state=VerificationState.PASSING,
    ).values_list("investigation_id", "at")
    return stats.team_statistics(
        (stats.InvestigationRow(*row) for row in rows)
        if not drills
        else (stats.InvestigationRow(*row[:4], False, *row[5:]) for row in rows),
        (stats.ConfirmRow(*row) for row in confirms),
        (stats.VerifiedRow(*row) for row in verified),
        (stats.OnsetRow(*row) for row in onsets),
        (stats.ActionRow(*row) for row in first_actions),
    )


def comments_of(investigation) -> list[ReviewComment]:
    return list(ReviewComment.objects.filter(investigation=investigation).select_related("author"))


def decisions_of(investigation) -> list[Decision]:
    return list(investigation.decisions.select_related("decided_by").order_by("sequence"))


def fixes_of(investigation):
    return list(investigation.fixes.select_related("applied_by").order_by("applied_at"))
