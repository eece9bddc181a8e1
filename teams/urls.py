from django.urls import path

from teams import views

app_name = "teams"
urlpatterns = [
    path("", views.team_list, name="list"),
    path("new/", views.create_team, name="create"),
    path("<uuid:team_id>/", views.team_detail, name="detail"),
    path("<uuid:team_id>/members/", views.add_member, name="add_member"),
    path("<uuid:team_id>/members/<uuid:member_id>/role/", views.change_role, name="change_role"),
    path("<uuid:team_id>/audit/", views.audit_log, name="audit"),
]
