from django.apps import AppConfig


class ProbesConfig(AppConfig):
    name = "probes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from deployments import calibration, proposals
        from probes import reported, series

        proposals.register_reader(reported.engine_report)
        calibration.register_reader(series.engine_series)
