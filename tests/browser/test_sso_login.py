"""Single sign-on in real Chromium against a real OpenID Connect provider (tests/sso/idp,
django-oauth-toolkit with PKCE required) started on 127.0.0.1: "Sign in with SSO" on
Atlas's login page, the IdP's login and consent pages, the authorization code redeemed
server-side with the PKCE verifier, and the landing in Atlas with the team role the IdP's
groups map to. No token is mocked: the provider refuses a code without its verifier.
"""

from __future__ import annotations

import pytest

from audit.models import AuditEntry
from sso.mapping import ACTOR
from sso.models import OidcIdentity
from teams.models import Membership, Role
from tests.browser.support import expect, section, sign_in_with_sso
from tests.support.oidc_provider import TEAM

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def log_out(page) -> None:
    page.get_by_role("button", name="Log out").click()
    expect()(page.get_by_role("heading", name="Log in")).to_be_visible()


def mapping_entries(action: str, username: str) -> list[AuditEntry]:
    return list(
        AuditEntry.objects.filter(action=action, actor_name=ACTOR, data__user=username).order_by(
            "at"
        )
    )


def test_sso_lands_in_the_mapped_team_with_the_groups_role(
    page, live_server, sso_on, requests_seen
):
    sign_in_with_sso(page, live_server.url, "alice")

    teams = section(page, "Your teams")
    expect()(teams.get_by_role("link", name=TEAM)).to_be_visible()
    expect()(page.get_by_role("status")).to_contain_text(f"joined {TEAM} as commander")
    membership = Membership.objects.get(user__username="alice", team__name=TEAM)
    assert membership.role == Role.COMMANDER
    identity = OidcIdentity.objects.get(user__username="alice")
    assert identity.issuer.startswith(sso_on.base)
    assert identity.groups == ["atlas-leads", "staff"]
    assert not identity.user.has_usable_password()  # signs in only through the IdP
    [added] = mapping_entries("member.add", "alice")
    assert added.team_id == membership.team_id and added.data["role"] == "commander"
    # The authorization request carried a PKCE S256 challenge (and the IdP requires one).
    [authorize] = [u for u in requests_seen.urls if "/o/authorize/?" in u][:1]
    assert "code_challenge_method=S256" in authorize and "code_challenge=" in authorize
    # A commander of the mapped team reaches its commander-only page.
    page.goto(f"/teams/{membership.team_id}/audit/")
    expect()(page.get_by_text("Added alice as commander (IdP groups)")).to_be_visible()


def test_groups_that_map_to_nothing_land_with_no_team_and_say_so(page, live_server, sso_on):
    sign_in_with_sso(page, live_server.url, "bob")

    notice = page.get_by_role("status")
    expect()(notice).to_contain_text("give you no team in Atlas")
    expect()(notice).to_contain_text("(marketing)")
    expect()(section(page, "Your teams")).to_contain_text("You are not in a team yet")
    assert not Membership.objects.filter(user__username="bob").exists()


def test_a_role_change_at_the_idp_applies_at_the_next_sign_in(page, live_server, sso_on):
    sso_on.set_groups("carol", "atlas-oncall")
    sign_in_with_sso(page, live_server.url, "carol")
    assert Membership.objects.get(user__username="carol").role == Role.RESPONDER

    log_out(page)
    sso_on.set_groups("carol", "atlas-readers")
    sign_in_with_sso(page, live_server.url, "carol")
    expect()(page.get_by_role("status")).to_contain_text(f"{TEAM}: responder -> viewer")
    assert Membership.objects.get(user__username="carol").role == Role.VIEWER
    [changed] = mapping_entries("member.role", "carol")
    assert (changed.data["from"], changed.data["to"]) == ("responder", "viewer")

    log_out(page)
    sso_on.set_groups("carol")
    sign_in_with_sso(page, live_server.url, "carol")
    expect()(page.get_by_role("status")).to_contain_text(f"left {TEAM}")
    assert not Membership.objects.filter(user__username="carol").exists()
    assert len(mapping_entries("member.remove", "carol")) == 1
    assert OidcIdentity.objects.filter(user__username="carol").count() == 1  # same account


def test_an_idp_user_named_like_a_local_account_gets_its_own(page, live_server, sso_on, commander):
    """The break-glass account is never taken over by name or e-mail."""
    commander.email = "cora-commander@example.test"  # the IdP user's address, too
    commander.save()
    sign_in_with_sso(page, live_server.url, "cora-commander")

    identity = OidcIdentity.objects.get(subject__isnull=False, user__username__startswith="cora")
    assert identity.user.username == "cora-commander-sso"
    assert identity.user.pk != commander.pk
    assert Membership.objects.get(user=identity.user).role == Role.VIEWER
    assert Membership.objects.get(user=commander).role == Role.COMMANDER  # untouched
    assert commander.memberships.count() == 1
