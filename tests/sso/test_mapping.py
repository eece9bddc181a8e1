"""The group mapping's rules without an IdP: it owns only the teams it names, creates a
named team that is missing, and never leaves a team without a commander."""

from __future__ import annotations

import pytest

from audit.models import AuditEntry
from sso import mapping
from sso.config import parse_group_roles
from teams.models import Membership, Role, Team

RULES = parse_group_roles(
    "Atlas serving:commander=leads,Atlas serving:viewer=all,New team:responder=new"
)


@pytest.mark.django_db
def test_teams_the_mapping_does_not_name_are_left_alone(commander, other_team):
    Membership.objects.create(team=other_team, user=commander, role=Role.VIEWER)
    mapping.apply(commander, ["leads"], RULES)
    assert Membership.objects.get(team=other_team, user=commander).role == Role.VIEWER


@pytest.mark.django_db
def test_a_named_team_that_is_missing_is_created_with_its_audit_entry(viewer):
    outcome = mapping.apply(viewer, ["new"], RULES)
    team = Team.objects.get(name="New team")
    assert Membership.objects.get(team=team, user=viewer).role == Role.RESPONDER
    assert outcome.teams["New team"] == "responder"
    assert AuditEntry.objects.filter(action="team.create", team=team).count() == 1
    # No group for the other mapped team: viewer's local membership there is removed.
    assert "left Atlas serving" in outcome.changes


@pytest.mark.django_db
def test_the_last_commander_is_kept_however_the_groups_changed(commander):
    outcome = mapping.apply(commander, ["all"], RULES)
    assert Membership.objects.get(user=commander, team__name="Atlas serving").role == Role.COMMANDER
    assert outcome.kept and not outcome.changes
    assert not AuditEntry.objects.filter(action__startswith="member.").exists()


@pytest.mark.django_db
def test_a_second_commander_can_be_demoted(commander, responder):
    mapping.apply(responder, ["leads"], RULES)
    outcome = mapping.apply(commander, ["all"], RULES)
    assert Membership.objects.get(user=commander, team__name="Atlas serving").role == Role.VIEWER
    assert outcome.changes == ["Atlas serving: commander -> viewer"]
