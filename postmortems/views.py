"""The postmortem page and its edits. Thin: authorise through ``access``, call one action
or the record loader, render."""

from __future__ import annotations

from django.contrib import messages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_POST

from investigations.access import get_investigation
from postmortems import actions, record
from postmortems.access import get_action_item, get_export
from postmortems.forms import ActionItemForm, ExportForm, NarrativeForm, ReviewForm
from postmortems.models import Export, Postmortem, PostmortemVersion
from postmortems.svg import alarm_chart
from teams.models import Membership, Role

RECENT_EXPORTS = 10


def _can_edit(user, investigation) -> bool:
    return Membership.objects.filter(
        team_id=investigation.team_id, user=user, role__in=[Role.COMMANDER, Role.RESPONDER]
    ).exists()


def _can_publish(user, investigation) -> bool:
    return Membership.objects.filter(
        team_id=investigation.team_id, user=user, role=Role.COMMANDER
    ).exists()


def _requested_version(request: HttpRequest) -> int | None:
    """``?version=N`` reads an earlier version; anything else, the newest."""
    raw = request.GET.get("version", "")
    return int(raw) if raw.isdigit() and 0 < int(raw) < 2**31 else None


def _page(request: HttpRequest, investigation, *, draft=None, conflict="", status=200):
    postmortem = Postmortem.objects.filter(investigation=investigation).first()
    versions = (
        list(
            PostmortemVersion.objects.filter(postmortem=postmortem)
            .select_related("edited_by")
            .only(
                "number",
                "created_at",
                "comment",
                "review_state",
                "reviewer_name",
                "published_at",
                "edited_by__username",
            )
            .order_by("-number")
        )
        if postmortem
        else []
    )
    newest = versions[0].number if versions else 0
    reading = _requested_version(request) if request.method == "GET" else None
    if reading is not None and reading not in {v.number for v in versions}:
        raise Http404("no such version")
    if reading == newest:
        reading = None
    doc = record.load_document(
        investigation,
        investigation_url=request.build_absolute_uri(
            reverse("investigations:detail", args=[investigation.pk])
        ),
        version_number=reading,
    )
    if draft is None:
        draft = {s["key"]: s["text"] for s in doc["narrative"]}
        draft["base_version"] = newest
    can_edit = _can_edit(request.user, investigation) and reading is None
    state = versions[0].review_state if versions else ""
    context = {
        "versions": versions,
        "reading": reading,
        "review_form": ReviewForm(initial={"version": newest}) if versions else None,
        "can_request_review": can_edit and state == "draft",
        "can_publish": reading is None
        and state == "in_review"
        and investigation.closed_at is not None
        and _can_publish(request.user, investigation),
        "doc": doc,
        "investigation": investigation,
        "chart_svg": alarm_chart(doc["chart"]),
        "can_edit": can_edit,
        "narrative_form": NarrativeForm(initial=draft) if can_edit else None,
        "action_form": ActionItemForm(team_id=investigation.team_id) if can_edit else None,
        "export_form": ExportForm() if can_edit else None,
        "conflict": conflict,
        **_exports_context(investigation),
    }
    return render(request, "postmortems/postmortem.html", context, status=status)


def _exports_context(investigation) -> dict:
    postmortem = Postmortem.objects.filter(investigation=investigation).first()
    exports = (
        list(postmortem.exports.select_related("created_by")[:RECENT_EXPORTS]) if postmortem else []
    )
    return {
        "investigation": investigation,
        "exports": exports,
        "exports_pending": any(not e.finished for e in exports),
    }


@require_GET
def postmortem(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id)
    return _page(request, investigation)


@require_POST
def edit_narrative(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    form = NarrativeForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Each section is limited in length; nothing was saved.")
        return redirect("postmortems:detail", investigation_id=investigation.pk)
    try:
        version = actions.save_narrative(
            investigation=investigation,
            sections=form.sections(),
            base_version=form.cleaned_data["base_version"],
            user=request.user,
            comment=form.cleaned_data["comment"],
        )
    except actions.VersionConflict as exc:
        # Their text stays in the form, on top of the version someone else saved.
        latest = actions.current_version(
            Postmortem.objects.filter(investigation=investigation).first()
        )
        draft = {**form.sections(), "comment": form.cleaned_data["comment"]}
        draft["base_version"] = latest.number if latest else 0
        return _page(request, investigation, draft=draft, conflict=str(exc), status=409)
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Saved as version {version.number}.")
    return redirect("postmortems:detail", investigation_id=investigation.pk)


def _review_step(request: HttpRequest, investigation_id, minimum: Role, step, done: str):
    investigation = get_investigation(request.user, investigation_id, minimum)
    form = ReviewForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Say which version (reload the page).")
    else:
        try:
            version = step(
                investigation=investigation,
                user=request.user,
                number=form.cleaned_data["version"],
            )
        except actions.ReviewRefused as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, done.format(version=version.number))
    return redirect(reverse("postmortems:detail", args=[investigation.pk]) + "#review")


@require_POST
def request_review(request: HttpRequest, investigation_id) -> HttpResponse:
    return _review_step(
        request,
        investigation_id,
        Role.RESPONDER,
        actions.request_review,
        "Version {version} is in review.",
    )


@require_POST
def publish(request: HttpRequest, investigation_id) -> HttpResponse:
    return _review_step(
        request,
        investigation_id,
        Role.COMMANDER,
        actions.publish,
        "Version {version} is published; later edits make a new version.",
    )


@require_POST
def add_action_item(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    form = ActionItemForm(request.POST, team_id=investigation.team_id)
    if not form.is_valid():
        messages.error(request, "An action item needs a title, a type and a team member or name.")
        return redirect("postmortems:detail", investigation_id=investigation.pk)
    data = form.cleaned_data
    try:
        actions.add_action_item(
            investigation=investigation,
            title=data["title"],
            type=data["type"],
            priority=data["priority"],
            owner=data["owner"],
            owner_text=data["owner_text"],
            due=data["due"],
            user=request.user,
        )
    except ValueError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Action item added.")
    return redirect(reverse("postmortems:detail", args=[investigation.pk]) + "#action-items")


@require_POST
def close_action_item(request: HttpRequest, investigation_id, item_id) -> HttpResponse:
    investigation, item = get_action_item(request.user, investigation_id, item_id)
    if actions.close_action_item(item=item, user=request.user):
        messages.success(request, f"Marked done: {item.title}")
    else:
        messages.error(request, "That action item was already done.")
    return redirect(reverse("postmortems:detail", args=[investigation.pk]) + "#action-items")


@require_POST
def request_export(request: HttpRequest, investigation_id) -> HttpResponse:
    investigation = get_investigation(request.user, investigation_id, Role.RESPONDER)
    form = ExportForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Pick Markdown or PDF.")
        return redirect("postmortems:detail", investigation_id=investigation.pk)
    export = actions.request_export(
        investigation=investigation,
        format=form.cleaned_data["format"],
        user=request.user,
        base_url=request.build_absolute_uri("/"),
    )
    if request.htmx:
        return render(request, "postmortems/_exports.html", _exports_context(investigation))
    messages.success(request, f"{export.get_format_display()} export queued.")
    return redirect(reverse("postmortems:detail", args=[investigation.pk]) + "#exports")


@require_GET
def exports(request: HttpRequest, investigation_id) -> HttpResponse:
    """The export list with each row's status, for htmx to poll until all are finished."""
    investigation = get_investigation(request.user, investigation_id)
    return render(request, "postmortems/_exports.html", _exports_context(investigation))


@require_GET
def download(request: HttpRequest, investigation_id, export_id) -> FileResponse:
    investigation, export = get_export(request.user, investigation_id, export_id)
    if export.status != Export.Status.DONE or not export.file:
        raise Http404("this export is not ready")
    try:
        handle = export.file.open("rb")
    except FileNotFoundError:
        raise Http404("this export's file is gone") from None
    name = slugify(str(investigation))[:60] or "investigation"
    version = f"-v{export.version_number}" if export.version_number else ""
    return FileResponse(
        handle,
        as_attachment=True,
        filename=f"postmortem-{name}{version}.{export.extension}",
        content_type=export.content_type,
    )
