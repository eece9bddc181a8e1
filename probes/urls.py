from django.urls import path

from probes import views

app_name = "probes"
urlpatterns = [
    path("deployments/<uuid:deployment_id>/targets/new/", views.add_target, name="add_target"),
    path(
        "deployments/<uuid:deployment_id>/targets/<uuid:target_id>/toggle/",
        views.toggle_target,
        name="toggle_target",
    ),
]
