from django.apps import AppConfig


class ProbesConfig(AppConfig):
    name = "probes"
    default_auto_field = "django.db.models.BigAutoField"
