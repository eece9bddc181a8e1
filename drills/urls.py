from django.urls import path

from drills import views

app_name = "drills"
urlpatterns = [
    path("drills/", views.drill_list, name="list"),
    path("drills/ranges/<uuid:range_id>/start/", views.start, name="start"),
    path("drills/<uuid:drill_id>/", views.detail, name="detail"),
    path("drills/<uuid:drill_id>/finish/", views.finish, name="finish"),
]
