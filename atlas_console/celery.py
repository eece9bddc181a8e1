"""The one Celery app. Configuration lives in Django settings under the CELERY_ prefix."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")

# amqp: kombu connections that survive the cleanup after a lost broker (atlas_console.broker).
app = Celery("atlas_console", amqp="atlas_console.broker:AMQP")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
