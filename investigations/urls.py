from django.urls import path

from investigations import views

app_name = "investigations"
urlpatterns = [
    path("deployments/<uuid:deployment_id>/", views.deployment_detail, name="deployment"),
    path(
        "deployments/<uuid:deployment_id>/targets/",
        views.deployment_targets,
        name="deployment_targets",
    ),
]
