from django.urls import path

from investigations import api, token_views

app_name = "api"
urlpatterns = [
    path("api/v1/investigations", api.open_investigation, name="open"),
    path("api/v1/investigations/<uuid:investigation_id>", api.investigation, name="investigation"),
    path("api/v1/investigations/<uuid:investigation_id>/decisions", api.decide, name="decisions"),
    path("api/v1/alertmanager", api.alertmanager, name="alertmanager"),
    path("teams/<uuid:team_id>/tokens/", token_views.tokens, name="tokens"),
    path(
        "teams/<uuid:team_id>/tokens/<uuid:token_id>/revoke/",
        token_views.revoke,
        name="revoke_token",
    ),
]
