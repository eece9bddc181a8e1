from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from atlas_console import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("status/workers/", views.workers_partial, name="workers_partial"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/password/",
        auth_views.PasswordChangeView.as_view(),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("sso/", include("sso.urls")),
    path("teams/", include("teams.urls")),
    path("", include("deployments.urls")),
    path("", include("probes.urls")),
    path("", include("investigations.urls")),
    path("", include("investigations.api_urls")),
    path("", include("artifacts.urls")),
    path("", include("postmortems.urls")),
    path("", include("review.urls")),
    path("", include("drills.urls")),
    path("", include("comms.urls")),
    path("admin/", admin.site.urls),
]

handler403 = "atlas_console.errors.forbidden"
handler404 = "atlas_console.errors.not_found"
handler400 = "atlas_console.errors.bad_request"
handler500 = "atlas_console.errors.server_error"
