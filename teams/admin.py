"""Teams and memberships in the admin, every change audited (audit.admin_changes): a role
changed here is a ``member.role`` entry on the team's audit page, like one changed on it."""

from django.contrib import admin

from audit.admin_changes import Audited, AuditedAdmin, audited
from teams.models import Membership, Team

audited(
    Team,
    Audited(add="team.create", change="team.update", delete="team.delete", team=lambda t: t.pk),
)
audited(
    Membership,
    Audited(add="member.add", change="member.role", delete="member.remove"),
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(AuditedAdmin):
    list_display = ["name", "id", "created"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(AuditedAdmin):
    list_display = ["team", "user", "role", "created"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__name"]
