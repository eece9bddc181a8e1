from django.contrib import admin
from django.db import models

from drills.models import Drill, DrillRange


@admin.register(DrillRange)
class DrillRangeAdmin(admin.ModelAdmin):
    list_display = ("deployment", "team", "simulator_url", "created")
    # Simulators are plain-http loopback services; say so rather than rely on Django's
    # changing default scheme.
    formfield_overrides = {models.URLField: {"assume_scheme": "http"}}


@admin.register(Drill)
class DrillAdmin(admin.ModelAdmin):
    list_display = ("investigation", "range", "scenario", "started_by", "started_at", "finished_at")
    readonly_fields = ("scenario", "truth_causes", "seed", "started_at")
