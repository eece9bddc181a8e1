from django.urls import path

from teams import views

app_name = "teams"
urlpatterns = [
    path("", views.team_list, name="list"),
    path("new/", views.create_team, name="create"),
    path("<uuid:team_id>/", views.team_detail, name="detail"),
    path("<uuid:team_id>/invitations/", views.invite, name="invite"),
    path(
        "<uuid:team_id>/invitations/<uuid:invitation_id>/revoke/",
        views.revoke_invitation,
        name="revoke_invitation",
    ),
    path("invitations/", views.my_invitations, name="invitations"),
    path(
        "invitations/<uuid:invitation_id>/accept/",
        views.accept_invitation,
        name="accept_invitation",
    ),
    path(
        "invitations/<uuid:invitation_id>/decline/",
        views.decline_invitation,
        name="decline_invitation",
    ),
    path("<uuid:team_id>/members/<uuid:member_id>/role/", views.change_role, name="change_role"),
    path("<uuid:team_id>/audit/", views.audit_log, name="audit"),
]
