from django.urls import path

from comms import views

app_name = "comms"
urlpatterns = [
    path("investigations/<uuid:investigation_id>/status/", views.post_update, name="post_update"),
    path("teams/<uuid:team_id>/chat/", views.webhooks, name="webhooks"),
    path(
        "teams/<uuid:team_id>/chat/<uuid:webhook_id>/toggle/",
        views.toggle_webhook,
        name="toggle_webhook",
    ),
    path(
        "teams/<uuid:team_id>/chat/<uuid:webhook_id>/retry/",
        views.retry_webhook,
        name="retry_webhook",
    ),
]
