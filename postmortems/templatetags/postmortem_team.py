"""``{% team_action_items team %}``: the open action items of every postmortem of a team,
for the team page to include without its view (which sits below postmortems in the
layers) knowing about them. Overdue ones first, flagged."""

from __future__ import annotations

from django import template
from django.db.models import Case, IntegerField, Value, When
from django.utils import timezone

from postmortems.models import ActionItem

register = template.Library()
SHOWN = 100


@register.inclusion_tag("postmortems/_team_action_items.html")
def team_action_items(team) -> dict:
    today = timezone.now().date()
    open_items = ActionItem.objects.filter(postmortem__team=team, status=ActionItem.Status.OPEN)
    items = list(
        open_items.select_related("owner", "postmortem__investigation__deployment")
        .annotate(
            late=Case(
                When(due__lt=today, then=Value(0)), default=Value(1), output_field=IntegerField()
            )
        )
        .order_by("late", "priority", "due", "created_at")[:SHOWN]
    )
    return {
        "rows": [(item, item.is_overdue(today)) for item in items],
        "open": open_items.count(),
        "overdue": open_items.filter(due__lt=today).count(),
        "done": ActionItem.objects.filter(
            postmortem__team=team, status=ActionItem.Status.DONE
        ).count(),
        "today": today,
        "shown": SHOWN,
    }
