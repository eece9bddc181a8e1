"""Deployments in the admin, every change audited (audit.admin_changes)."""

from django.contrib import admin
from django.db import models

from audit.admin_changes import Audited, AuditedAdmin, audited
from deployments.models import Deployment, EngineController

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


@admin.register(EngineController)
class EngineControllerAdmin(admin.ModelAdmin):
    list_display = ["deployment", "kind", "url", "shows_clock"]
    list_filter = ["kind"]
    # Simulators are plain-http loopback services; say so rather than rely on Django's
    # changing default scheme.
    formfield_overrides = {models.URLField: {"assume_scheme": "http"}}
