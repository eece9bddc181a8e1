from django.urls import path

from audit import views

app_name = "audit"
urlpatterns = [
    path(
        "investigations/<uuid:investigation_id>/audit/",
        views.investigation_log,
        name="investigation",
    ),
    path("teams/<uuid:team_id>/audit/", views.team_log, name="team"),
]
