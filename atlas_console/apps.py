from django.apps import AppConfig


class AtlasConsoleConfig(AppConfig):
    name = "atlas_console"
    verbose_name = "Atlas Console"

    def ready(self) -> None:
        from atlas_console import checks  # noqa: F401 - registers system checks
