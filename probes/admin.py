from django.contrib import admin

from probes.models import WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["hostname", "queue", "sent_at", "recorded_at"]
    readonly_fields = ["tick", "hostname", "queue", "sent_at", "recorded_at"]
