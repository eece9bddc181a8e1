"""Changes to postmortems: each action is one transaction with its side effects.

Nothing here copies the investigation's record: the narrative, action items and export
requests are the only things people add.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

from django.db import transaction
from django.utils import timezone

import audit
from investigations.models import Investigation
from postmortems.models import (
    SECTION_MAX_CHARS,
    SECTIONS,
    ActionItem,
    Export,
    Postmortem,
    PostmortemVersion,
    ReviewState,
)


class VersionConflict(Exception):
    """Someone saved a newer version since this person started editing."""


class ReviewRefused(ValueError):
    """The review step does not apply to the postmortem as it stands (said why)."""


def ensure_postmortem(investigation: Investigation) -> Postmortem:
    """The investigation's postmortem row, created on first need (race-safe: one-to-one)."""
    postmortem, _ = Postmortem.objects.get_or_create(
        investigation=investigation, defaults={"team_id": investigation.team_id}
    )
    return postmortem


def current_version(postmortem: Postmortem | None) -> PostmortemVersion | None:
    if postmortem is None:
        return None
    return postmortem.versions.select_related("edited_by").order_by("-number").first()


@transaction.atomic
def save_narrative(
    *,
    investigation: Investigation,
    sections: Mapping[str, str],
    base_version: int,
    user,
    comment: str = "",
) -> PostmortemVersion:
    """Save the narrative as a new version on top of ``base_version`` (the one the editor
    loaded). Locks the postmortem row, so concurrent saves are serialised; a stale base
    raises ``VersionConflict`` naming who saved what, instead of overwriting it. The
    unique (postmortem, number) constraint backs the lock up."""
    postmortem = ensure_postmortem(investigation)
    locked = Postmortem.objects.select_for_update().get(pk=postmortem.pk)
    latest = current_version(locked)
    number = latest.number if latest else 0
    if base_version != number:
        who = latest.edited_by.get_username() if latest and latest.edited_by else "someone"
        at = f" at {latest.created_at:%H:%M:%S} UTC" if latest else ""
        raise VersionConflict(
            f"{who} saved version {number}{at} while you were editing version {base_version}. "
            "Your text was not saved; it is kept in the form below. Compare it with the "
            "current version and save again."
        )
    clean = {
        key: str(sections.get(key, "") or "").replace("\r\n", "\n").strip()[:SECTION_MAX_CHARS]
        for key in SECTIONS
    }
    if latest is not None and clean == {k: latest.sections.get(k, "") for k in SECTIONS}:
        raise ValueError(f"Nothing changed since version {number}; no new version saved.")
    version = PostmortemVersion.objects.create(
        postmortem=locked,
        number=number + 1,
        sections=clean,
        comment=comment.strip()[:500],
        edited_by=user,
    )
    audit.record(
        "postmortem.narrative",
        actor=user,
        investigation=investigation,
        obj=version,
        summary=f"Saved postmortem narrative version {version.number}",
        data={"version": version.number, "comment": version.comment},
    )
    return version


def add_action_item(
    *,
    investigation: Investigation,
    title: str,
    type: str,
    user,
    owner=None,
    owner_text: str = "",
    due: date | None = None,
    priority: str = ActionItem.Priority.P2,
) -> ActionItem:
    """Add an action item; ``owner`` must be a member of the investigation's team."""
    if type not in ActionItem.Type.values:
        raise ValueError(f"unknown action item type {type!r}")
    if priority not in ActionItem.Priority.values:
        raise ValueError(f"unknown action item priority {priority!r}")
    if not title.strip():
        raise ValueError("an action item needs a title")
    if owner is not None and not owner.memberships.filter(team_id=investigation.team_id).exists():
        raise ValueError("the owner must be a member of this team")
    with transaction.atomic():
        item = ActionItem.objects.create(
            postmortem=ensure_postmortem(investigation),
            title=title.strip()[:300],
            type=type,
            priority=priority,
            owner=owner,
            owner_text="" if owner is not None else owner_text.strip()[:200],
            due=due,
            created_by=user,
        )
        audit.record(
            "postmortem.action_item",
            actor=user,
            investigation=investigation,
            obj=item,
            summary=f"Added action item ({item.type}, {item.priority}): {item.title}",
            data={
                "title": item.title,
                "type": item.type,
                "priority": item.priority,
                "owner": item.owner_name,
                "due": due.isoformat() if due else None,
            },
        )
    return item


def close_action_item(*, item: ActionItem, user) -> bool:
    """Mark an open item done; False if someone already did (conditional UPDATE)."""
    with transaction.atomic():
        done = ActionItem.objects.filter(pk=item.pk, status=ActionItem.Status.OPEN).update(
            status=ActionItem.Status.DONE, closed_by=user, closed_at=timezone.now()
        )
        if done:
            audit.record(
                "postmortem.action_item_done",
                actor=user,
                investigation=item.postmortem.investigation,
                obj=item,
                summary=f"Marked action item done: {item.title}",
                data={"title": item.title},
            )
    return bool(done)


def _newest_locked(investigation: Investigation) -> PostmortemVersion:
    """The newest version, its postmortem row locked (review steps are serialised with
    edits, so a step always applies to the version people saw)."""
    postmortem = Postmortem.objects.filter(investigation=investigation).first()
    if postmortem is None:
        raise ReviewRefused("Nothing is written yet: save the narrative first.")
    Postmortem.objects.select_for_update().get(pk=postmortem.pk)
    latest = current_version(postmortem)
    if latest is None:
        raise ReviewRefused("Nothing is written yet: save the narrative first.")
    return latest


@transaction.atomic
def request_review(*, investigation: Investigation, user, number: int) -> PostmortemVersion:
    """Ask for the newest version (``number``, the one the person read) to be reviewed."""
    latest = _newest_locked(investigation)
    if latest.number != number:
        raise ReviewRefused(
            f"Version {latest.number} was saved since you read version {number}; "
            "read it, then ask for its review."
        )
    if latest.review_state != ReviewState.DRAFT:
        raise ReviewRefused(f"Version {number} is already {latest.get_review_state_display()}.")
    now = timezone.now()
    PostmortemVersion.objects.filter(pk=latest.pk, review_state=ReviewState.DRAFT).update(
        review_state=ReviewState.IN_REVIEW, review_requested_by=user, review_requested_at=now
    )
    latest.refresh_from_db()
    audit.record(
        "postmortem.review_request",
        actor=user,
        investigation=investigation,
        obj=latest,
        summary=f"Asked for a review of postmortem version {number}",
        data={"version": number},
    )
    return latest


@transaction.atomic
def publish(*, investigation: Investigation, user, number: int) -> PostmortemVersion:
    """The reviewer publishes the version in review: reviewer and date recorded, and the
    whole document as it reads now kept with it. Only a closed investigation's postmortem
    is published: its record is frozen, so the published version reads the same later."""
    from postmortems.markdown import render_markdown
    from postmortems.record import load_document

    if investigation.closed_at is None:
        raise ReviewRefused("Close the investigation before publishing its postmortem.")
    latest = _newest_locked(investigation)
    if latest.number != number:
        raise ReviewRefused(
            f"Version {latest.number} was saved since you read version {number}; "
            "it needs its own review."
        )
    if latest.review_state != ReviewState.IN_REVIEW:
        raise ReviewRefused(
            f"Version {number} is {latest.get_review_state_display().lower()}: "
            "only a version in review can be published."
        )
    now = timezone.now()
    name = user.get_username()[:200]
    PostmortemVersion.objects.filter(pk=latest.pk, review_state=ReviewState.IN_REVIEW).update(
        review_state=ReviewState.PUBLISHED,
        reviewed_by=user,
        reviewer_name=name,
        published_at=now,
    )
    markdown = render_markdown(load_document(investigation, version_number=number))
    PostmortemVersion.objects.filter(pk=latest.pk).update(published_markdown=markdown)
    latest.refresh_from_db()
    audit.record(
        "postmortem.publish",
        actor=user,
        investigation=investigation,
        obj=latest,
        summary=f"Reviewed and published postmortem version {number}",
        data={"version": number, "reviewer": name},
    )
    return latest


@transaction.atomic
def request_export(
    *, investigation: Investigation, format: str, user, base_url: str = ""
) -> Export:
    """Create the export row (queued) for the current narrative version and enqueue its
    rendering once the row is committed. The row, not Celery, is what the page polls."""
    if format not in Export.Format.values:
        raise ValueError(f"unknown export format {format!r}")
    postmortem = ensure_postmortem(investigation)
    latest = current_version(postmortem)
    export = Export.objects.create(
        team_id=investigation.team_id,
        postmortem=postmortem,
        format=format,
        base_url=base_url[:500],
        version_number=latest.number if latest else 0,
        created_by=user,
    )
    audit.record(
        "postmortem.export",
        actor=user,
        investigation=investigation,
        obj=export,
        summary=f"Requested a {format} export of version {export.version_number}",
        data={"format": format, "version": export.version_number},
    )
    from postmortems.tasks import export_postmortem

    transaction.on_commit(lambda: export_postmortem.delay(str(export.pk)))
    return export
