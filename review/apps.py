from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "review"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from review import receivers

        receivers.connect()
