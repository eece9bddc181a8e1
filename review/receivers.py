"""Keeping search documents current: any change to a part of the record schedules a
rebuild of its investigation's document once the change commits.

After commit, because the document must describe committed rows, and because a failure to
index (logged; ``manage.py reindex`` repairs it) must never undo the decision, fix or
narrative someone just saved. A deletion cascading from the investigation itself (or its
deployment or team) schedules nothing: the document goes with it.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save

from deployments.models import Deployment
from investigations.models import Decision, FixRecord, Investigation
from postmortems.models import Postmortem, PostmortemVersion
from review import indexing
from review.models import ReviewComment
from teams.models import Team

log = logging.getLogger(__name__)

# Investigation fields the document reads; saving only other fields changes nothing.
DOCUMENT_FIELDS = frozenset({"title", "symptom", "root_cause", "close_override"})
_ENCLOSING = (Investigation, Deployment, Team)


def _schedule(investigation_id) -> None:
    def rebuild_search_document() -> None:
        try:
            indexing.rebuild([investigation_id])
        except Exception:
            log.exception("review.index.failed", extra={"investigation": str(investigation_id)})

    transaction.on_commit(rebuild_search_document)


def _cascaded(origin) -> bool:
    model = origin.model if isinstance(origin, QuerySet) else type(origin)
    return issubclass(model, _ENCLOSING)


def investigation_saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    if update_fields is not None and not DOCUMENT_FIELDS.intersection(update_fields):
        return
    _schedule(instance.pk)


def part_saved(sender, instance, **kwargs) -> None:
    _schedule(instance.investigation_id)


def part_deleted(sender, instance, origin=None, **kwargs) -> None:
    if origin is not None and _cascaded(origin):
        return
    _schedule(instance.investigation_id)


def version_changed(sender, instance, origin=None, **kwargs) -> None:
    if origin is not None and _cascaded(origin):
        return
    # Resolved now: when the postmortem itself is being deleted, its row is still there.
    if PostmortemVersion.postmortem.is_cached(instance):
        investigation_id = instance.postmortem.investigation_id
    else:
        investigation_id = (
            Postmortem.objects.filter(pk=instance.postmortem_id)
            .values_list("investigation_id", flat=True)
            .first()
        )
    if investigation_id is not None:
        _schedule(investigation_id)


def connect() -> None:
    """Called once from ReviewConfig.ready()."""
    uid = "review.search"
    post_save.connect(investigation_saved, sender=Investigation, dispatch_uid=f"{uid}.inv")
    for model in (Decision, FixRecord, ReviewComment):
        name = model.__name__
        post_save.connect(part_saved, sender=model, dispatch_uid=f"{uid}.save.{name}")
        post_delete.connect(part_deleted, sender=model, dispatch_uid=f"{uid}.delete.{name}")
    post_save.connect(version_changed, sender=PostmortemVersion, dispatch_uid=f"{uid}.pmv.save")
    post_delete.connect(version_changed, sender=PostmortemVersion, dispatch_uid=f"{uid}.pmv.delete")
