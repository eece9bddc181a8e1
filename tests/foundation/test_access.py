"""Login is required everywhere, and teams are isolated from each other."""

from __future__ import annotations

import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from teams.models import Invitation, Membership, Role

# Pages that must answer without a session: logging in (the local form, and single sign-on's
# start and IdP callback, which 404 while SSO is off), and health probes for load balancers.
PUBLIC = {"login", "healthz", "sso:start", "sso:callback"}


def _walk(patterns, prefix: str = "", namespace: str = ""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            ns = entry.namespace or namespace
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern), ns)
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry, namespace


def _example_path(route: str) -> str:
    """Fill a route with plausible values; routes here use path converters only."""
    import re

    if route.startswith("^") or "(?P" in route:  # admin's regex routes
        route = re.sub(r"\(\?P<(\w+)>[^)]*\)", "1", route).lstrip("^").rstrip("$")
        route = route.replace("\\", "")
    route = re.sub(r"<uuid:\w+>", str(uuid.uuid4()), route)
    route = re.sub(r"<int:\w+>", "1", route)
    route = re.sub(r"<(?:str|slug|path):\w+>|<\w+>", "x", route)
    return "/" + route


ALL_ROUTES = sorted(
    {
        _example_path(route)
        for route, pattern, namespace in _walk(get_resolver().url_patterns)
        if pattern.name not in PUBLIC and f"{namespace}:{pattern.name}" not in PUBLIC
    }
)


def test_the_route_list_covers_the_app():
    assert any(path.startswith("/teams/") for path in ALL_ROUTES)
    assert "/" in ALL_ROUTES


@pytest.mark.django_db
@pytest.mark.parametrize("path", ALL_ROUTES)
@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_users_are_sent_to_login_everywhere(client, path, method):
    response = getattr(client, method)(path)
    if path.startswith("/api/"):
        # Token endpoints never redirect to a login page: no token is a 401 (or 405).
        assert response.status_code in (401, 405), path
        return
    if path.startswith("/admin/"):
        # The admin has its own login page; it still never serves content anonymously.
        assert response.status_code in (302, 404, 405)
        if response.status_code == 302:
            assert "/login/" in response["Location"]
        return
    if response.status_code == 405:
        pytest.skip(f"{method.upper()} not allowed on {path}")
    assert response.status_code == 302, path
    assert response["Location"].startswith(reverse("login") + "?next=")


@pytest.mark.django_db
def test_health_endpoint_is_public_and_says_nothing_private(client):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_an_outsider_gets_404_for_another_teams_page(client_for, outsider, team):
    response = client_for(outsider).get(reverse("teams:detail", args=[team.id]))
    assert response.status_code == 404


def test_an_outsider_cannot_write_to_another_team(client_for, outsider, team):
    response = client_for(outsider).post(
        reverse("teams:invite", args=[team.id]), {"invitee": "olga-outsider", "role": "viewer"}
    )
    assert response.status_code == 404
    assert not Invitation.objects.filter(team=team).exists()


@pytest.mark.parametrize("actor", ["commander", "responder", "viewer"])
def test_members_can_read_their_team(client_for, request, actor, team):
    response = client_for(request.getfixturevalue(actor)).get(
        reverse("teams:detail", args=[team.id])
    )
    assert response.status_code == 200
    assert team.name in response.content.decode()


@pytest.mark.parametrize(("actor", "status"), [("viewer", 403), ("responder", 403)])
def test_only_commanders_manage_members(client_for, request, actor, status, team, outsider):
    response = client_for(request.getfixturevalue(actor)).post(
        reverse("teams:invite", args=[team.id]),
        {"invitee": outsider.username, "role": Role.COMMANDER},
    )
    assert response.status_code == status
    assert not Invitation.objects.filter(team=team).exists()


def test_a_commander_invites_and_the_invitee_joins_by_accepting(
    client_for, commander, team, outsider
):
    """Inviting adds no one (consent, issue 19.12); accepting makes the membership."""
    response = client_for(commander).post(
        reverse("teams:invite", args=[team.id]),
        {"invitee": outsider.username, "role": Role.VIEWER},
    )
    assert response.status_code == 302
    assert not Membership.objects.filter(team=team, user=outsider).exists()
    invitation = Invitation.objects.get(team=team)
    client_for(outsider).post(reverse("teams:accept_invitation", args=[invitation.id]))
    assert Membership.objects.get(team=team, user=outsider).role == Role.VIEWER


def test_a_team_keeps_its_last_commander(client_for, commander, team):
    mine = Membership.objects.get(team=team, user=commander)
    client_for(commander).post(
        reverse("teams:change_role", args=[team.id, mine.id]), {"role": Role.VIEWER}
    )
    mine.refresh_from_db()
    assert mine.role == Role.COMMANDER


def test_role_change_of_another_teams_member_is_404(client_for, commander, team, outsider):
    foreign = Membership.objects.get(user=outsider)
    response = client_for(commander).post(
        reverse("teams:change_role", args=[team.id, foreign.id]), {"role": Role.VIEWER}
    )
    assert response.status_code == 404
    foreign.refresh_from_db()
    assert foreign.role == Role.COMMANDER


def test_creating_a_team_makes_you_its_commander(client_for, viewer):
    response = client_for(viewer).post(reverse("teams:create"), {"name": "Night shift"})
    assert response.status_code == 302
    assert Membership.objects.get(team__name="Night shift", user=viewer).role == Role.COMMANDER


def test_public_ids_are_uuids(team, commander):
    path = reverse("teams:detail", args=[team.id])
    assert str(team.id) in path
    assert isinstance(Membership.objects.get(user=commander).id, uuid.UUID)


def test_the_login_page_renders_and_logs_in(client, commander):
    from tests.conftest import PASSWORD

    assert client.get(reverse("login")).status_code == 200
    response = client.post(reverse("login"), {"username": commander.username, "password": PASSWORD})
    assert response.status_code == 302
    home = client.get(reverse("home"))
    assert home.status_code == 200
    assert "Atlas serving" in home.content.decode()


# --- Login throttling (issue 19.7) ------------------------------------------------------------
# Real POSTs against the real login views, django-axes counting in the test database. Before,
# 40 wrong passwords and then the right one logged in, on both doors.

LOGIN_DOORS = ["login", "admin:login"]


def _attempt(client, door: str, username: str, password: str, address: str = "127.0.0.1"):
    return client.post(
        reverse(door), {"username": username, "password": password}, REMOTE_ADDR=address
    )


def _logged_in(client) -> bool:
    from django.conf import settings

    return settings.SESSION_COOKIE_NAME in client.cookies and bool(
        client.cookies[settings.SESSION_COOKIE_NAME].value
    )


@pytest.mark.parametrize("door", LOGIN_DOORS)
def test_forty_wrong_passwords_lock_the_username_and_address_out(
    client, django_user_model, settings, door
):
    from audit.models import AuditEntry
    from tests.conftest import PASSWORD

    # Staff, so the admin's own login would accept the right password too.
    django_user_model.objects.create_user("stan-staff", password=PASSWORD, is_staff=True)
    limit = settings.AXES_FAILURE_LIMIT
    codes = [_attempt(client, door, "stan-staff", f"guess-{i}").status_code for i in range(40)]
    # Refused as a wrong password until the limit, then refused outright (429), unhashed.
    assert codes[: limit - 1] == [200] * (limit - 1)
    assert set(codes[limit - 1 :]) == {429}
    right = _attempt(client, door, "stan-staff", PASSWORD)
    assert right.status_code == 429 and not _logged_in(client)
    assert b"Too many failed log-ins" in right.content
    # Audited: one entry per lockout (not one per refused attempt), naming what was guessed.
    (entry,) = AuditEntry.objects.filter(action="login.lockout")
    assert entry.data["username"] == "stan-staff" and entry.data["ip_address"] == "127.0.0.1"
    assert entry.data["path"] == reverse(door)
    # Per username *and* address: the same user from elsewhere still logs in, so a stranger
    # cannot lock a commander out by guessing from their own machine.
    elsewhere = _attempt(client, door, "stan-staff", PASSWORD, address="10.9.8.7")
    assert elsewhere.status_code == 302 and _logged_in(client)


def test_the_lockout_ends_after_the_cool_off(client, commander, settings, frozen_now, time_machine):
    from tests.conftest import PASSWORD

    for i in range(settings.AXES_FAILURE_LIMIT):
        _attempt(client, "login", commander.username, f"guess-{i}")
    assert _attempt(client, "login", commander.username, PASSWORD).status_code == 429
    time_machine.shift(settings.AXES_COOLOFF_TIME.total_seconds() + 1)
    assert _attempt(client, "login", commander.username, PASSWORD).status_code == 302


def test_a_success_resets_the_count_so_typos_never_add_up(client, commander, settings):
    from tests.conftest import PASSWORD

    for _ in range(3):
        for i in range(settings.AXES_FAILURE_LIMIT - 1):
            assert _attempt(client, "login", commander.username, f"typo-{i}").status_code == 200
        assert _attempt(client, "login", commander.username, PASSWORD).status_code == 302
        client.logout()
