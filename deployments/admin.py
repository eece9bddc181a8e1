"""Deployments in the admin, every change audited (audit.admin_changes)."""

from django.contrib import admin

from audit.admin_changes import Audited, AuditedAdmin, audited
from deployments.models import Deployment

audited(
    Deployment,
    Audited(add="deployment.create", change="deployment.update", delete="deployment.delete"),
)


@admin.register(Deployment)
class DeploymentAdmin(AuditedAdmin):
    list_display = ["name", "team", "engine", "model_name", "poll_interval_s", "polling_active"]
    list_filter = ["engine", "polling_active", "team"]
    search_fields = ["name", "model_name"]
    readonly_fields = ["polling_active", "created"]
