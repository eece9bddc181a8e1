"""``{% status_updates investigation %}`` and ``{% team_chat team %}``: the comms panels,
for the investigation and team pages to include without their views (which sit below
comms in the layers) knowing about it."""

from __future__ import annotations

from django import template

from comms.models import Delivery, DeliveryState, StatusUpdate
from teams.models import Membership, Role

register = template.Library()
SHOWN = 5


def _membership(user, team_id) -> Membership | None:
    if not getattr(user, "is_authenticated", False):
        return None
    return Membership.objects.filter(team_id=team_id, user=user).first()


@register.inclusion_tag("comms/_status_updates.html", takes_context=True)
def status_updates(context, investigation) -> dict:
    """The latest updates (newest first, the current one on top) and, for responders and
    commanders of an open investigation, the form to post one."""
    membership = _membership(context["request"].user, investigation.team_id)
    updates = list(StatusUpdate.objects.filter(investigation=investigation).order_by("-at")[:SHOWN])
    return {
        "investigation": investigation,
        "current": updates[0] if updates else None,
        "earlier": updates[1:],
        "can_post": bool(membership and membership.allows(Role.RESPONDER))
        and investigation.status == "open",
        "csrf_token": context.get("csrf_token"),
    }


@register.inclusion_tag("comms/_team_chat.html", takes_context=True)
def team_chat(context, team) -> dict:
    """Failed and retrying deliveries, to every member (no URL shown: those are secrets);
    the link to manage webhooks for commanders."""
    membership = _membership(context["request"].user, team.pk)
    problems = (
        Delivery.objects.filter(
            webhook__team=team, state__in=[DeliveryState.FAILED, DeliveryState.RETRYING]
        )
        .select_related("webhook", "update__investigation")
        .order_by("-last_attempt_at")[:20]
    )
    return {
        "team": team,
        "problems": problems,
        "webhook_count": team.chat_webhooks.filter(enabled=True).count(),
        "can_manage": bool(membership and membership.allows(Role.COMMANDER)),
    }
