"""Pages show a write form exactly to the roles the permission matrix lets use it.

Each page is rendered for every member role; every POST form on it is resolved to its URL
pattern and looked up in ``MATRIX`` (tests/trust/test_permission_matrix.py): a viewer must
never be shown a Confirm, Eliminate or Close form that answers 403, and a commander must
see every form a commander may use (the "Add a probe target" form was missing for them).
The commander's page is the full set: each other role sees exactly the part of it that the
matrix allows them.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.urls import resolve, reverse

from tests.trust.test_permission_matrix import (  # noqa: F401 - fixtures used by name
    ADMIN_LOGIN,
    COMMANDER,
    LOGIN,
    MATRIX,
    MEMBERS,
    VIEWER,
    fast_passwords,
    world,
)

pytestmark = pytest.mark.django_db

PAGES = {
    "home": lambda w: reverse("home"),
    "deployment page": lambda w: reverse("investigations:deployment", args=[w.deployment.pk]),
    "probe targets partial": lambda w: reverse(
        "investigations:deployment_targets", args=[w.deployment.pk]
    ),
    "investigation page": lambda w: reverse("investigations:detail", args=[w.investigation.pk]),
    "tree partial": lambda w: reverse("investigations:tree", args=[w.investigation.pk]),
    "team page": lambda w: reverse("teams:detail", args=[w.team.pk]),
    "postmortem page": lambda w: reverse("postmortems:detail", args=[w.investigation.pk]),
}


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.actions: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        attributes = dict(attrs)
        if tag == "form" and (attributes.get("method") or "").lower() == "post":
            self.actions.add(attributes.get("action") or "")


def _post_forms(client, url: str) -> set[str]:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    parser = _Forms()
    parser.feed(response.content.decode())
    return parser.actions


def _allowed(role: str, action: str) -> bool:
    key = resolve(action).view_name
    assert key in MATRIX, f"a form posts to {action} ({key}), which the matrix does not classify"
    return MATRIX[key].post[role] not in (403, 404, LOGIN, ADMIN_LOGIN)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_write_forms_follow_the_permission_matrix(client, world, page):  # noqa: F811
    url = PAGES[page](world)
    shown = {}
    for role in MEMBERS:
        client.force_login(world.users[role])
        shown[role] = _post_forms(client, url)
    assert shown[COMMANDER], f"the {page} shows a commander no form at all"
    for role in MEMBERS:
        expected = {a for a in shown[COMMANDER] if _allowed(role, a)}
        refused = sorted(a for a in shown[role] if not _allowed(role, a))
        assert not refused, f"the {page} shows a {role} forms that answer 403: {refused}"
        assert shown[role] == expected, (page, role, shown[role] ^ expected)


def test_commanders_see_the_add_target_form_and_viewers_no_decision_forms(client, world):  # noqa: F811
    add = reverse("investigations:add_target", args=[world.deployment.pk])
    decide = reverse("investigations:decide", args=[world.investigation.pk])
    close = reverse("investigations:close", args=[world.investigation.pk])
    client.force_login(world.users[COMMANDER])
    assert add in _post_forms(client, PAGES["deployment page"](world))
    assert {decide, close} <= _post_forms(client, PAGES["investigation page"](world))
    client.force_login(world.users[VIEWER])
    page = _post_forms(client, PAGES["investigation page"](world))
    assert not {decide, close} & page


def _headings(html: str) -> list[str]:
    class Headings(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[str] = []
            self._open = False

        def handle_starttag(self, tag, attrs) -> None:
            self._open = tag in ("h1", "h2")
            if self._open:
                self.found.append("")

        def handle_endtag(self, tag) -> None:
            self._open = False

        def handle_data(self, data) -> None:
            if self._open:
                self.found[-1] += data.strip()

    parser = Headings()
    parser.feed(html)
    return parser.found


def test_a_refused_target_re_renders_the_whole_deployment_page(client, world):  # noqa: F811
    client.force_login(world.users[COMMANDER])
    page = client.get(PAGES["deployment page"](world)).content.decode()
    refused = client.post(
        reverse("investigations:add_target", args=[world.deployment.pk]),
        {"kind": "engine", "url": "http://admin:pw@10.0.0.5/metrics"},
    )
    assert refused.status_code == 400
    body = refused.content.decode()
    assert _headings(body) == _headings(page)
    assert 'class="errorlist' in body and "credentials" in body
    assert world.investigation.title in body or str(world.investigation) in body


def test_only_the_invitee_is_shown_answer_forms(client, world):  # noqa: F811
    """The Invitations page is not team-scoped, so the role walk above cannot cover it: the
    invitee (the outsider here) sees Accept and Decline, each allowed to them by the
    matrix; every member of the inviting team sees none (they would answer 404)."""
    from tests.trust.test_permission_matrix import OUTSIDER

    url = reverse("teams:invitations")
    logout = {reverse("logout")}  # in every page's header
    client.force_login(world.users[OUTSIDER])
    shown = _post_forms(client, url) - logout
    assert shown == {
        reverse("teams:accept_invitation", args=[world.invitation.pk]),
        reverse("teams:decline_invitation", args=[world.invitation.pk]),
    }
    assert all(_allowed(OUTSIDER, action) for action in shown)
    for role in MEMBERS:
        client.force_login(world.users[role])
        assert _post_forms(client, url) == logout, role
