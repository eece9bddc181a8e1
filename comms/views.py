"""Status updates on the investigation page, chat webhooks on the team's. Thin: authorise,
call one action, redirect."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from comms import actions
from comms.forms import StatusUpdateForm, WebhookForm
from comms.models import ChatWebhook, Delivery, DeliveryState
from investigations.access import get_investigation
from investigations.actions import InvestigationClosed
from teams.access import authorize
from teams.models import Role


@require_POST
def post_update(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    form = StatusUpdateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A status update needs some text (at most 2,000 characters).")
    else:
        try:
            update = actions.post_status_update(
                investigation=investigation, text=form.cleaned_data["text"], user=request.user
            )
        except (InvestigationClosed, ValueError) as exc:
            messages.error(request, str(exc))
        else:
            sent = update.deliveries.count()
            messages.success(
                request, f"Status posted{f'; sending to {sent} chat channel(s)' if sent else ''}."
            )
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_http_methods(["GET", "POST"])
def webhooks(request: HttpRequest, team_id) -> HttpResponse:
    """Commanders: the team's webhooks (their URLs are secrets) and the form to add one."""
    membership = authorize(request.user, team_id, Role.COMMANDER)
    team = membership.team
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        webhook = actions.add_webhook(team=team, **form.cleaned_data)
        messages.success(request, f"Status updates will be sent to {webhook}.")
        return redirect("comms:webhooks", team_id=team.pk)
    context = {
        "team": team,
        "form": form,
        "webhooks": team.chat_webhooks.all(),
        "failed": Delivery.objects.filter(
            webhook__team=team, state__in=[DeliveryState.FAILED, DeliveryState.RETRYING]
        ).select_related("webhook", "update__investigation")[:50],
    }
    return render(request, "comms/webhooks.html", context, status=400 if form.errors else 200)


def _webhook(request: HttpRequest, team_id, webhook_id) -> ChatWebhook:
    membership = authorize(request.user, team_id, Role.COMMANDER)
    try:
        return membership.team.chat_webhooks.get(pk=webhook_id)
    except (ChatWebhook.DoesNotExist, ValueError):
        raise Http404 from None


@require_POST
def toggle_webhook(request: HttpRequest, team_id, webhook_id) -> HttpResponse:
    webhook = _webhook(request, team_id, webhook_id)
    actions.set_enabled(webhook=webhook, enabled=not webhook.enabled)
    messages.success(request, f"{webhook} {'enabled' if webhook.enabled else 'disabled'}.")
    return redirect("comms:webhooks", team_id=webhook.team_id)


@require_POST
def retry_webhook(request: HttpRequest, team_id, webhook_id) -> HttpResponse:
    webhook = _webhook(request, team_id, webhook_id)
    count = actions.retry_failed(webhook=webhook)
    messages.success(request, f"{count} failed deliveries to {webhook} queued again.")
    return redirect("comms:webhooks", team_id=webhook.team_id)
