"""Under /api/ every error is JSON, trailing slash or not: an API client (curl, Alertmanager,
a script) cannot read the console's HTML error pages."""

from __future__ import annotations

import json

import pytest
from django.test import Client, RequestFactory

from atlas_console import errors


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/investigations/",  # the trailing slash a user adds by habit
        "/api/v1/alertmanager/",
        "/api/v1/nothing-here",
        "/api/v2/investigations",
    ],
)
def test_unknown_api_paths_answer_json_404(path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert path in body["error"]
    if path.endswith("/"):
        assert "trailing slash" in body["error"]


@pytest.mark.django_db
def test_pages_outside_the_api_keep_the_html_404() -> None:
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    ("handler", "status"),
    [(errors.server_error, 500), (errors.bad_request, 400), (errors.forbidden, 403)],
)
def test_api_errors_of_every_status_are_json(handler, status: int) -> None:
    request = RequestFactory().post("/api/v1/investigations")
    response = handler(request) if handler is errors.server_error else handler(request, None)
    assert response.status_code == status
    assert "error" in json.loads(response.content)


def test_a_server_error_page_needs_no_template_context() -> None:
    response = errors.server_error(RequestFactory().get("/deployments/"))
    assert response.status_code == 500
    assert b"server log" in response.content and b"atlas.css" in response.content


@pytest.mark.django_db
def test_a_wrong_method_is_a_json_405_with_its_allow_header(team, commander) -> None:
    from investigations.tokens import create_token

    secret = create_token(team=team, name="curl", user=commander)[1]
    response = Client().delete("/api/v1/alertmanager", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 405
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {"error": "method not allowed"}
    assert "POST" in response["Allow"]


@pytest.mark.django_db
def test_without_a_token_the_answer_is_a_json_401() -> None:
    response = Client().delete("/api/v1/alertmanager")
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert "Bearer" in response["WWW-Authenticate"]
