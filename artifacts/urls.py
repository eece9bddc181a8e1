from django.urls import path

from artifacts import api, views

app_name = "artifacts"
urlpatterns = [
    path("investigations/<uuid:investigation_id>/artifacts/upload/", views.upload, name="upload"),
    path("investigations/<uuid:investigation_id>/artifacts/", views.artifact_list, name="list"),
    path(
        "investigations/<uuid:investigation_id>/artifacts/collect/",
        views.collect,
        name="collect",
    ),
    path("artifacts/<uuid:artifact_id>/", views.detail, name="detail"),
    path(
        "api/v1/investigations/<uuid:investigation_id>/artifacts",
        api.upload,
        name="api_upload",
    ),
    path("api/v1/artifacts/<uuid:artifact_id>", api.artifact, name="api_artifact"),
]
