from django.apps import AppConfig


class DrillsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "drills"
    verbose_name = "Drills"

    def ready(self) -> None:
        from drills import signals  # noqa: F401 - connects the receivers
