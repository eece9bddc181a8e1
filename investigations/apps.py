from django.apps import AppConfig


class InvestigationsConfig(AppConfig):
    name = "investigations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from investigations import polling, windows
        from probes import retention

        polling.connect()
        retention.keep_windows("investigations", windows.investigation_windows)
