from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "artifacts"
    verbose_name = "Profiler artifacts"

    def ready(self) -> None:
        from artifacts import evidence
        from investigations import observations

        observations.register_reader(evidence.PREFIX, evidence.add_artifact_signals)
