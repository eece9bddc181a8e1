from django.urls import path

from review import views

app_name = "review"
urlpatterns = [
    path("review/", views.review_list, name="list"),
    path("review/stats/", views.team_stats, name="stats"),
    path("investigations/<uuid:investigation_id>/review/", views.review_detail, name="detail"),
    path(
        "investigations/<uuid:investigation_id>/review/comments/",
        views.add_comment,
        name="comment",
    ),
]
