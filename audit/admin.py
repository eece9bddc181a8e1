"""The audit log in the admin: read-only for staff; only superusers may delete (purge).

Deleting goes through ``purging()``, the one path the model's append-only guard lets
through, and the admin refuses it to anyone who is not a superuser.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction

import audit
from audit.admin_changes import Audited, AuditedAdmin, audited
from audit.models import PURGING, AuditEntry


@contextlib.contextmanager
def purging(user) -> Iterator[None]:
    """Let ``user`` (a superuser) delete audit entries inside this block, in one
    transaction; on PostgreSQL also lifts the trigger for that transaction only."""
    if not getattr(user, "is_superuser", False):
        raise PermissionDenied("only superusers delete audit entries")
    token = PURGING.set(True)
    try:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL atlas.audit_purge = 'on'")
            yield
    finally:
        PURGING.reset(token)


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["at", "actor_name", "team", "action", "summary"]
    list_filter = ["action"]
    search_fields = ["actor_name", "summary", "object_id"]
    date_hierarchy = "at"
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return bool(request.user.is_superuser)

    def delete_model(self, request, obj) -> None:
        with purging(request.user):
            obj.delete()

    def delete_queryset(self, request, queryset) -> None:
        with purging(request.user):
            queryset.delete()


# Making someone staff or superuser is the strongest role change there is (issue 19.11):
# Django's own user admin, audited. This app loads after django.contrib.auth, whose admin
# module has registered the user model by now.
User = get_user_model()
audited(
    User,
    Audited(add="user.create", change="user.update", delete="user.delete", team=lambda _obj: None),
)
if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class AuditedUserAdmin(AuditedAdmin, UserAdmin):
    """Django's user admin; each add, change and delete also writes an audit entry, and so
    does setting a password on its own page (which saves outside ``save_model``)."""

    def user_change_password(self, request, id, form_url=""):
        with transaction.atomic():
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:
                user = User._default_manager.get(pk=id)
                audit.record(
                    "user.update",
                    actor=request.user,
                    obj=user,
                    summary=f"Password of {user.get_username()} set in the admin",
                    data={"via": "admin", "changed": {"password": ["(set)", "(set)"]}},
                )
        return response
