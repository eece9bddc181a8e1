from django.apps import AppConfig


class PostmortemsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "postmortems"
    verbose_name = "Postmortems"
