"""Changes made in the Django admin, audited like the same change made through a page.

The admin writes rows without going through the apps' actions, so a role change made there
wrote no audit entry (issue 19.11): a superuser could make anyone a commander, or staff,
and the log would show nothing. Every ``AuditedAdmin`` (and every inline of a model
registered here) records each add, change and delete in the admin's own transaction,
under the domain's action where there is one (``member.role`` for a membership's role,
so the team's audit page shows it with the others), with each changed field's value
before and after.

Which action each model's changes are recorded under is a registry (``audited``), filled
by the app that owns the model; nothing here knows the apps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.db import models, transaction

import audit

# Values never copied into the log, only the fact that they changed.
SECRET_FIELDS = frozenset({"password"})
VALUE_MAX = 120


def _team_field(obj: models.Model) -> Any:
    return getattr(obj, "team_id", None)


@dataclass(frozen=True)
class Audited:
    """The actions a model's admin changes are recorded under, and the team they concern."""

    add: str
    change: str
    delete: str
    team: Callable[[models.Model], Any] = _team_field


AUDITED: dict[type[models.Model], Audited] = {}


def audited(model: type[models.Model], spec: Audited) -> None:
    """Register how ``model``'s admin changes are audited (its app's admin module calls it)."""
    AUDITED[model] = spec


def _values(obj: models.Model) -> dict[str, str]:
    """The row's stored values as text, secrets masked: what a change is a diff of."""
    out = {}
    for f in obj._meta.concrete_fields:
        if f.primary_key:
            continue
        value = f.value_from_object(obj)
        out[f.name] = "(set)" if f.name in SECRET_FIELDS and value else str(value)[:VALUE_MAX]
    return out


def _stored(obj: models.Model) -> dict[str, str]:
    """The row as the database holds it now (before the admin saves over it)."""
    if obj.pk is None:
        return {}
    current = type(obj)._default_manager.filter(pk=obj.pk).first()
    return _values(current) if current is not None else {}


def _label(obj: models.Model) -> str:
    return f"{obj._meta.verbose_name} {obj}"


def record_add(user, obj: models.Model) -> None:
    spec = AUDITED.get(type(obj))
    if spec is None:
        return
    values = _values(obj)
    audit.record(
        spec.add,
        actor=user,
        team=spec.team(obj),
        obj=obj,
        summary=f"Added {_label(obj)} in the admin",
        data={"via": "admin", "values": values},
    )


def record_change(user, obj: models.Model, before: Mapping[str, str]) -> None:
    """One entry for one save, naming every field that changed; nothing when none did."""
    spec = AUDITED.get(type(obj))
    if spec is None:
        return
    after = _values(obj)
    changed = {k: [before.get(k, ""), v] for k, v in after.items() if before.get(k, "") != v}
    if not changed:
        return
    audit.record(
        spec.change,
        actor=user,
        team=spec.team(obj),
        obj=obj,
        summary=f"{_label(obj)} in the admin: "
        + ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items()),
        data={"via": "admin", "changed": changed},
    )


def record_delete(user, obj: models.Model, team: Any) -> None:
    spec = AUDITED.get(type(obj))
    if spec is None:
        return
    audit.record(
        spec.delete,
        actor=user,
        team=team,
        obj=obj,
        summary=f"Deleted {_label(obj)} in the admin",
        data={"via": "admin", "values": _values(obj)},
    )


class AuditedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose adds, changes and deletes (its inlines' too) are audited.

    The change and delete views already run in one transaction, so each entry commits
    with its change or not at all; the bulk delete action does not, so it is wrapped here.
    """

    def save_model(self, request, obj, form, change) -> None:
        before = _stored(obj) if change else {}
        super().save_model(request, obj, form, change)
        if change:
            record_change(request.user, obj, before)
        else:
            record_add(request.user, obj)

    def save_formset(self, request, form, formset, change) -> None:
        befores = {
            f.instance.pk: _stored(f.instance)
            for f in formset.initial_forms
            if f.instance.pk is not None
        }
        spec = AUDITED.get(formset.model)
        deleted = [
            (f.instance, f.instance.pk, spec.team(f.instance))
            for f in formset.deleted_forms
            if spec is not None and f.instance.pk is not None
        ]
        super().save_formset(request, form, formset, change)
        for obj in formset.new_objects:
            record_add(request.user, obj)
        for obj, _fields in formset.changed_objects:
            record_change(request.user, obj, befores.get(obj.pk, {}))
        for obj, pk, team in deleted:
            obj.pk = pk  # deleting cleared it; the entry names the row that was
            record_delete(request.user, obj, team)

    def delete_model(self, request, obj) -> None:
        team = AUDITED[type(obj)].team(obj) if type(obj) in AUDITED else None
        pk = obj.pk
        super().delete_model(request, obj)
        obj.pk = pk  # the entry names the row that was
        record_delete(request.user, obj, team)

    def delete_queryset(self, request, queryset) -> None:
        with transaction.atomic(using=queryset.db):
            spec = AUDITED.get(queryset.model)
            rows = [(obj, spec.team(obj)) for obj in queryset] if spec is not None else []
            super().delete_queryset(request, queryset)
            for obj, team in rows:
                record_delete(request.user, obj, team)
