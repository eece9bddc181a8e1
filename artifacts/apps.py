from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "artifacts"
    verbose_name = "Profiler artifacts"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, pre_delete

        from artifacts import evidence, tasks
        from artifacts.models import Artifact

        post_delete.connect(
            lambda sender, instance, **kwargs: evidence.forget(instance),
            sender=Artifact,
            weak=False,
            dispatch_uid="artifacts.evidence.forget",
        )
        pre_delete.connect(
            lambda sender, instance, **kwargs: tasks.release_duplicates(instance),
            sender=Artifact,
            weak=False,
            dispatch_uid="artifacts.tasks.release_duplicates",
        )
