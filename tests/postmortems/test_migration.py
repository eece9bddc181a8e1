"""Existing action items migrate: the first type names (detective, preventative,
corrective) become the ones teams use, and a done item without a close time gets its
creation time, so the new constraints hold for old rows (PostgreSQL included, where the
data update and the constraints run in separate migrations)."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _migrate(targets):
    MigrationExecutor(connection).migrate(targets)
    return MigrationExecutor(connection)._create_project_state(with_applied_migrations=True).apps


def test_old_action_items_take_the_new_types_and_constraints():
    old = _migrate([("postmortems", "0001_initial")])
    team = old.get_model("teams", "Team").objects.create(id=uuid.uuid4(), name="Atlas serving")
    deployment = old.get_model("deployments", "Deployment").objects.create(
        id=uuid.uuid4(), team=team, name="atlas-prod"
    )
    investigation = old.get_model("investigations", "Investigation").objects.create(
        id=uuid.uuid4(), team=team, deployment=deployment, symptom="high-ttft"
    )
    postmortem = old.get_model("postmortems", "Postmortem").objects.create(
        id=uuid.uuid4(), team=team, investigation=investigation
    )
    ActionItem = old.get_model("postmortems", "ActionItem")
    for title, kind, status in [
        ("a", "detective", "open"),
        ("b", "preventative", "done"),
        ("c", "corrective", "open"),
    ]:
        ActionItem.objects.create(
            id=uuid.uuid4(), postmortem=postmortem, title=title, type=kind, status=status
        )
    version = old.get_model("postmortems", "PostmortemVersion").objects.create(
        id=uuid.uuid4(), postmortem=postmortem, number=1, sections={"summary": "old"}
    )

    new = _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    items = {i.title: i for i in new.get_model("postmortems", "ActionItem").objects.all()}
    assert {t: (i.type, i.priority) for t, i in items.items()} == {
        "a": ("detect", "p2"),
        "b": ("prevent", "p2"),
        "c": ("mitigate", "p2"),
    }
    assert items["b"].closed_at == items["b"].created_at and items["a"].closed_at is None
    migrated = new.get_model("postmortems", "PostmortemVersion").objects.get(pk=version.pk)
    assert (migrated.review_state, migrated.reviewer_name) == ("draft", "")
