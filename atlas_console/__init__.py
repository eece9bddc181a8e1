"""Atlas Console project package: settings, URLs, the Celery app and system checks."""

from atlas_console.celery import app as celery_app

__all__ = ("celery_app",)
