"""Reading what the review pages show: a few queries each, never one per investigation."""

from __future__ import annotations

from django.db.models import Case, Min, Q, Value, When

from investigations.choices import EventKind, VerificationState
from investigations.models import Decision, Investigation, TimelineEvent
from review import stats
from review.models import ReviewComment


def team_statistics(team_id) -> tuple[stats.TeamStatistics, stats.TeamStatistics]:
    """The team's statistics and, kept apart, its drills' (each drill measured as if it were
    real), from one read: five queries whatever the number of investigations. The team's
    investigations (drills included, so the page can say how many were left out), the
    confirm decisions and passing verifications of its closed ones, and per investigation
    its first alarm or alert firing and its first event a person wrote (aggregated in the
    database: one row per investigation). Rows of the other set are ignored by each
    computation (they are looked up by investigation)."""
    rows = list(
        Investigation.objects.filter(team_id=team_id)
        .annotate(overridden=Case(When(close_override="", then=Value(False)), default=Value(True)))
        .values_list(
            "pk", "opened_at", "closed_at", "root_cause", "is_drill", "overridden", "severity"
        )
    )
    closed = {
        "investigation__team_id": team_id,
        "investigation__status": Investigation.Status.CLOSED,
    }
    events = TimelineEvent.objects.filter(**closed)
    onsets = [
        stats.OnsetRow(*row)
        for row in events.filter(
            Q(kind=EventKind.ALARM, data__firing=True)
            | Q(kind=EventKind.ALERT, data__status="firing")
        )
        .values("investigation_id")
        .annotate(first=Min("at"))
        .values_list("investigation_id", "first")
    ]
    first_actions = [
        stats.ActionRow(*row)
        for row in events.filter(actor__isnull=False)
        .values("investigation_id")
        .annotate(first=Min("at"))
        .values_list("investigation_id", "first")
    ]
    confirms = [
        stats.ConfirmRow(*row)
        for row in Decision.objects.filter(**closed, action=Decision.Action.CONFIRM).values_list(
            "investigation_id", "node", "decided_at"
        )
    ]
    verified = [
        stats.VerifiedRow(*row)
        for row in events.filter(
            kind=EventKind.VERIFICATION, data__state=VerificationState.PASSING
        ).values_list("investigation_id", "at")
    ]
    real = stats.team_statistics(
        (stats.InvestigationRow(*row) for row in rows), confirms, verified, onsets, first_actions
    )
    drills = stats.team_statistics(
        (stats.InvestigationRow(*row[:4], False, *row[5:]) for row in rows if row[4]),
        confirms,
        verified,
        onsets,
        first_actions,
    )
    return real, drills


def comments_of(investigation) -> list[ReviewComment]:
    return list(ReviewComment.objects.filter(investigation=investigation).select_related("author"))


def decisions_of(investigation) -> list[Decision]:
    return list(investigation.decisions.select_related("decided_by").order_by("sequence"))


def fixes_of(investigation):
    return list(investigation.fixes.select_related("applied_by").order_by("applied_at"))
