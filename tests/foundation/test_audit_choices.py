"""Audited actions are an enum the migrations do not copy (see ``audit.models.action_choices``)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from audit.models import Action, AuditEntry


@pytest.mark.django_db
def test_the_migrations_read_the_actions_from_the_enum():
    state = MigrationLoader(connection).project_state()
    field = state.models["audit", "auditentry"].fields["action"]
    assert list(field.choices) == list(Action.choices)
    assert dict(AuditEntry._meta.get_field("action").choices) == dict(Action.choices)


@pytest.mark.django_db
def test_a_new_audited_action_needs_no_migration(monkeypatch):
    from audit import models

    members = [(m.name, (m.value, m.label)) for m in Action]
    extended = models.models.TextChoices(
        "Action", [*members, ("DRILL_GRADE", ("drill.grade", "Drill graded"))]
    )
    monkeypatch.setattr(models, "Action", extended)
    assert "drill.grade" in dict(AuditEntry._meta.get_field("action").choices)
    call_command("makemigrations", "audit", "--check", "--dry-run", verbosity=0)
