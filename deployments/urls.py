from django.urls import path

from deployments import views

app_name = "deployments"
urlpatterns = [
    path("deployments/new/", views.create_deployment, name="create"),
    path("deployments/<uuid:deployment_id>/edit/", views.edit_deployment, name="edit"),
]
