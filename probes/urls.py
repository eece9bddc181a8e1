from django.urls import path

from probes import views

app_name = "discovery"
urlpatterns = [
    path("deployments/new/from-engine/", views.from_engine, name="from_engine"),
    path(
        "deployments/<uuid:deployment_id>/discover/",
        views.prometheus_discovery,
        name="prometheus",
    ),
]
