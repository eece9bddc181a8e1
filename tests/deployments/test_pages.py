"""Commanders register deployments and edit their budgets; nobody else can, and every
change is on the audit log."""

from __future__ import annotations

import dataclasses

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from deployments.budget import Budget
from deployments.models import Deployment

pytestmark = pytest.mark.django_db

FORM = {
    "name": "atlas-canary",
    "engine": "sglang",
    "model_name": "atlas-140b",
    "poll_interval_s": 10,
    **dataclasses.asdict(Budget()),
}


def test_the_model_defaults_are_the_budget_defaults(team):
    """One source of defaults: a fresh deployment's budget is exactly ``Budget()``."""
    assert Deployment(team=team, name="x").budget == Budget()


def test_a_commander_creates_a_deployment(client_for, commander, team):
    response = client_for(commander).post(
        reverse("deployments:create"), {**FORM, "team_choice": team.pk, "tp_size": 8}
    )
    deployment = Deployment.objects.get(name="atlas-canary")
    assert response.status_code == 302
    assert response.url == reverse("investigations:deployment", args=[deployment.pk])
    assert (deployment.team, deployment.engine, deployment.tp_size) == (team, "sglang", 8)
    assert deployment.polling_active is False
    entry = AuditEntry.objects.get(action="deployment.create")
    assert entry.actor == commander
    assert entry.data["budget"]["tp_size"] == 8


def test_the_create_page_offers_only_teams_the_user_commands(
    client_for, commander, team, other_team
):
    body = client_for(commander).get(reverse("deployments:create")).content.decode()
    assert team.name in body
    assert other_team.name not in body


def test_a_commander_cannot_create_in_a_team_they_do_not_command(client_for, commander, other_team):
    response = client_for(commander).post(
        reverse("deployments:create"), {**FORM, "team_choice": other_team.pk}
    )
    assert response.status_code == 400
    assert not Deployment.objects.exists()


@pytest.mark.parametrize("actor", ["responder", "viewer"])
def test_only_commanders_may_create(client_for, request, actor):
    client = client_for(request.getfixturevalue(actor))
    assert client.get(reverse("deployments:create")).status_code == 403
    assert client.post(reverse("deployments:create"), FORM).status_code == 403


def test_a_commander_edits_the_budget(client_for, commander, deployment):
    response = client_for(commander).post(
        reverse("deployments:edit", args=[deployment.pk]),
        {**FORM, "name": deployment.name, "kv_budget_gib_per_rank": 30, "ttft_target_ms": 450},
    )
    assert response.status_code == 302
    deployment.refresh_from_db()
    assert (deployment.kv_budget_gib_per_rank, deployment.ttft_target_ms) == (30.0, 450.0)
    changed = AuditEntry.objects.get(action="deployment.update").data["changed"]
    assert changed["kv_budget_gib_per_rank"] == [35.0, 30.0]
    assert changed["ttft_target_ms"] == [600.0, 450.0]
    assert "tp_size" not in changed


@pytest.mark.parametrize(
    ("actor", "status"), [("responder", 403), ("viewer", 403), ("outsider", 404)]
)
def test_others_cannot_edit(client_for, request, deployment, actor, status):
    client = client_for(request.getfixturevalue(actor))
    url = reverse("deployments:edit", args=[deployment.pk])
    assert client.get(url).status_code == status
    assert client.post(url, {**FORM, "tp_size": 1}).status_code == status
    deployment.refresh_from_db()
    assert deployment.tp_size == Budget().tp_size


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tp_size", 0),
        ("kv_bytes_per_token", 0),
        ("decode_step_ms", -1),
        ("prefill_ms_per_token", -0.01),
        ("queue_baseline_high", 1),  # below the low baseline (3)
        ("poll_interval_s", 0),
    ],
)
def test_an_impossible_budget_is_refused_with_the_page_intact(
    client_for, commander, deployment, field, value
):
    response = client_for(commander).post(
        reverse("deployments:edit", args=[deployment.pk]),
        {**FORM, "name": deployment.name, field: value},
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "Budget constants" in body and 'class="errorlist' in body
    deployment.refresh_from_db()
    assert deployment.budget == Budget()
    assert not AuditEntry.objects.filter(action="deployment.update").exists()


def test_a_second_deployment_of_the_same_name_is_refused(
    client_for, commander, team, make_deployment
):
    make_deployment("atlas-canary")
    other = make_deployment("atlas-other")
    client = client_for(commander)
    created = client.post(reverse("deployments:create"), {**FORM, "team_choice": team.pk})
    renamed = client.post(reverse("deployments:edit", args=[other.pk]), FORM)
    assert (created.status_code, renamed.status_code) == (400, 400)
    assert "already has a deployment named atlas-canary" in renamed.content.decode()
    assert Deployment.objects.filter(name="atlas-canary").count() == 1


def test_the_deployment_page_links_to_the_editor_for_commanders_only(
    client_for, commander, responder, viewer, deployment
):
    edit = reverse("deployments:edit", args=[deployment.pk])
    page = reverse("investigations:deployment", args=[deployment.pk])
    assert edit in client_for(commander).get(page).content.decode()
    for user in (responder, viewer):
        assert edit not in client_for(user).get(page).content.decode()


def test_the_home_page_offers_registration_to_commanders_only(client_for, commander, responder):
    create = reverse("deployments:create")
    assert create in client_for(commander).get("/").content.decode()
    assert create not in client_for(responder).get("/").content.decode()
