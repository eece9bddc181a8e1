from django.urls import path

from sso import views

app_name = "sso"
urlpatterns = [
    path("start/", views.Start.as_view(), name="start"),
    path("callback/", views.Callback.as_view(), name="callback"),
]
