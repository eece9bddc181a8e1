"""Existing databases migrate cleanly: the deployment rows, their ids, the foreign keys
onto them and the admin's content type survive the model's move from investigations to
deployments, and the polling flag starts out true where an investigation is open."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BEFORE = [("investigations", "0006_deployment_sm_clock_mhz"), ("deployments", None)]


def _migrate(targets):
    """Migrate to ``targets``; the models as the applied migrations leave them."""
    MigrationExecutor(connection).migrate(targets)
    return MigrationExecutor(connection)._create_project_state(with_applied_migrations=True).apps


def _latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


def test_rows_survive_the_move():
    old = _migrate(BEFORE)
    Team = old.get_model("teams", "Team")
    OldDeployment = old.get_model("investigations", "Deployment")
    Investigation = old.get_model("investigations", "Investigation")
    Target = old.get_model("probes", "Target")
    ContentType = old.get_model("contenttypes", "ContentType")
    content_type = ContentType.objects.get_or_create(
        app_label="investigations", model="deployment"
    )[0]
    team = Team.objects.create(id=uuid.uuid4(), name="Atlas serving")
    busy = OldDeployment.objects.create(id=uuid.uuid4(), team=team, name="busy", tp_size=8)
    quiet = OldDeployment.objects.create(id=uuid.uuid4(), team=team, name="quiet")
    Investigation.objects.create(id=uuid.uuid4(), team=team, deployment=busy, symptom="high-ttft")
    Investigation.objects.create(
        id=uuid.uuid4(), team=team, deployment=quiet, symptom="high-ttft", status="closed"
    )
    target = Target.objects.create(
        id=uuid.uuid4(), deployment=busy, kind="engine", url="http://127.0.0.1:9/metrics"
    )

    new = _migrate(_latest())
    Deployment = new.get_model("deployments", "Deployment")
    rows = {d.name: d for d in Deployment.objects.all()}
    assert (rows["busy"].pk, rows["quiet"].pk) == (busy.pk, quiet.pk)
    assert rows["busy"].tp_size == 8
    assert (rows["busy"].polling_active, rows["quiet"].polling_active) == (True, False)
    assert new.get_model("probes", "Target").objects.get(pk=target.pk).deployment_id == busy.pk
    assert {
        i.deployment.name for i in new.get_model("investigations", "Investigation").objects.all()
    } == {"busy", "quiet"}
    moved = new.get_model("contenttypes", "ContentType").objects.get(pk=content_type.pk)
    assert (moved.app_label, moved.model) == ("deployments", "deployment")
