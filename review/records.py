"""Reading what the review pages show: a few queries each, never one per investigation."""

from __future__ import annotations

from django.db.models import Case, Value, When

from investigations.choices import EventKind, VerificationState
from investigations.models import Decision, Investigation, TimelineEvent
from review import stats
from review.models import ReviewComment


def team_statistics(team_id) -> stats.TeamStatistics:
    """Three queries: the team's investigations (drills included, so the page can say how
    many were left out) and the confirm decisions on them."""
    rows = (
        Investigation.objects.filter(team_id=team_id)
        .annotate(overridden=Case(When(close_override="", then=Value(False)), default=Value(True)))
        .values_list("pk", "opened_at", "closed_at", "root_cause", "is_drill", "overridden")
    )
    confirms = Decision.objects.filter(
        investigation__team_id=team_id,
        investigation__is_drill=False,
        investigation__status=Investigation.Status.CLOSED,
        action=Decision.Action.CONFIRM,
    ).values_list("investigation_id", "node", "decided_at")
    verified = TimelineEvent.objects.filter(
        investigation__team_id=team_id,
        investigation__is_drill=False,
        investigation__status=Investigation.Status.CLOSED,
        kind=EventKind.VERIFICATION,
        data__state=VerificationState.PASSING,
    ).values_list("investigation_id", "at")
    return stats.team_statistics(
        (stats.InvestigationRow(*row) for row in rows),
        (stats.ConfirmRow(*row) for row in confirms),
        (stats.VerifiedRow(*row) for row in verified),
    )


def comments_of(investigation) -> list[ReviewComment]:
    return list(ReviewComment.objects.filter(investigation=investigation).select_related("author"))


def decisions_of(investigation) -> list[Decision]:
    return list(investigation.decisions.select_related("decided_by").order_by("sequence"))


def fixes_of(investigation):
    return list(investigation.fixes.select_related("applied_by").order_by("applied_at"))
