"""An analysed artifact's signals are ordinary observations (issue 13: one read path).

They are written when the analysis is stored, on the deployment's one target of the stored
``artifacts`` kind, and read by ``load_observations`` like any other signal; that target
is never polled, never shown as a probe, never offered in the form, and never pruned.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps as global_apps
from django.urls import reverse

from artifacts import evidence
from artifacts.actions import store
from artifacts.models import Artifact, Status
from artifacts.tasks import analyse_artifact
from investigations import actions, observations
from investigations.observations import load_observations
from probes import retention
from probes.dispatch import due_polls
from probes.forms import TargetForm
from probes.models import Observation, Target, TargetKind
from tests.support import builders

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
GC_PAUSE = "artifact_gc_pause_max_ms"


def _gc_log() -> bytes:
    block = (
        "gc: collecting generation 2...\n"
        "gc: objects in each generation: 500 3000 1200000\n"
        "gc: objects in permanent generation: 0\n"
        "gc: done, 100 unreachable, 0 uncollectable, 0.1200s elapsed\n"
    )
    return (block * 5).encode()


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path


def _analysed(deployment, captured_at=T0, **fields) -> Artifact:
    artifact = store(
        deployment=deployment,
        chunks=[_gc_log()],
        name="stderr.log",
        source="upload",
        captured_at=captured_at,
        **fields,
    )
    assert analyse_artifact.apply(args=[str(artifact.pk)]).get() == Status.DONE
    return Artifact.objects.get(pk=artifact.pk)


@pytest.mark.django_db
def test_an_uploads_signals_are_observations_the_one_read_path_reads(team):
    deployment = builders.deployment(team)
    artifact = _analysed(deployment)
    label = f"artifact={str(artifact.pk)[:8]}"
    stored = Observation.objects.filter(target__deployment=deployment)
    assert {(o.signal, o.labels, o.taken_at, o.value) for o in stored} == {
        (name, label, T0, value) for name, value in artifact.signals.items()
    }
    assert set(stored.values_list("target__kind", flat=True)) == {"artifacts"}
    # No second path: evaluation has nothing registered beside the observation rows.
    assert not hasattr(observations, "register_reader")
    view = load_observations(deployment.id, {GC_PAUSE: 3600}, T0 + timedelta(minutes=5))
    # The series the artifact reader gave: one per artifact, tagged by it, at captured_at.
    assert view[("artifact", GC_PAUSE)] == [(label, [(T0.timestamp(), artifact.signals[GC_PAUSE])])]
    # Read within the check's window of captured_at only, as before.
    later = load_observations(deployment.id, {GC_PAUSE: 3600}, T0 + timedelta(hours=1))
    assert ("artifact", GC_PAUSE) not in later
    # Writing them again (a redelivered analysis) adds nothing.
    evidence.record_signals(artifact.pk, deployment.pk, T0, artifact.signals)
    assert stored.count() == len(artifact.signals)


@pytest.mark.django_db
def test_a_rejected_artifact_writes_no_evidence(team):
    deployment = builders.deployment(team)
    artifact = store(deployment=deployment, chunks=[b"not a profile"], name="x", source="upload")
    assert analyse_artifact.apply(args=[str(artifact.pk)]).get() == Status.REJECTED
    assert not Observation.objects.exists()


@pytest.mark.django_db
def test_the_artifact_store_is_no_probe(team, client_for, commander):
    deployment = builders.deployment(team, polling_active=True)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=commander
    )
    _analysed(deployment, captured_at=investigation.opened_at)
    stored = Target.objects.get(deployment=deployment)
    assert stored.kind == "artifacts"
    # Never dispatched for polling, alone or beside a polled target.
    assert due_polls(investigation.opened_at) == []
    engine = builders.target(deployment)
    (due,) = due_polls(investigation.opened_at)
    assert due.has_http_targets and due.host_targets == ()
    # Not on the probe-health strip, the deployment's table, nor counted on the home page.
    client = client_for(commander)
    detail = client.get(reverse("investigations:detail", args=[investigation.pk]))
    assert list(detail.context["targets"]) == [engine]
    assert 'data-testid="probe-artifacts"' not in detail.content.decode()
    page = client.get(reverse("investigations:deployment", args=[deployment.pk]))
    assert list(page.context["targets"]) == [engine]
    (home,) = client.get(reverse("home")).context["deployments"]
    assert list(home.targets.all()) == [engine]
    # Nobody adds, enables or disables one.
    form = TargetForm({"kind": "artifacts"}, instance=Target(deployment=deployment))
    assert not form.is_valid() and "kind" in form.errors
    assert "artifacts" not in [value for value, _ in form.fields["kind"].choices]
    toggle = reverse("investigations:toggle_target", args=[deployment.pk, stored.pk])
    assert client.post(toggle).status_code == 404


@pytest.mark.django_db
def test_retention_keeps_artifact_evidence_as_long_as_the_artifact(team):
    deployment = builders.deployment(team)
    artifact = _analysed(deployment)
    engine = builders.target(deployment)
    Observation.objects.create(target=engine, taken_at=T0, signal="kv_cache_usage", value=0.5)
    retention.prune(timedelta(days=7), now=T0 + timedelta(days=90))
    assert not Observation.objects.filter(target=engine).exists()  # raw poll data goes
    assert Observation.objects.filter(target__kind="artifacts").count() == len(artifact.signals)


@pytest.mark.django_db
def test_the_migration_writes_evidence_for_artifacts_analysed_before(team):
    migration = importlib.import_module(
        "artifacts.migrations.0003_artifact_signals_as_observations"
    )
    deployment = builders.deployment(team)
    fields = {"team": team, "deployment": deployment, "size_bytes": 1, "source": "upload"}
    done = Artifact.objects.create(
        **fields,
        name="done",
        captured_at=T0,
        status=Status.DONE,
        signals={GC_PAUSE: 120.0, "artifact_gc_collections": 5, "not_a_signal": 1.0},
    )
    Artifact.objects.create(
        **fields, name="rejected", captured_at=T0, status=Status.REJECTED, signals={GC_PAUSE: 1.0}
    )
    migration.forwards(global_apps, None)
    migration.forwards(global_apps, None)  # idempotent
    label = f"artifact={str(done.pk)[:8]}"
    assert set(Observation.objects.values_list("signal", "labels", "taken_at", "value")) == {
        (GC_PAUSE, label, T0, 120.0),
        ("artifact_gc_collections", label, T0, 5.0),
    }
    # What the migration wrote is what a fresh analysis writes.
    assert evidence.observations_of(done.pk, done.signals) == [
        (GC_PAUSE, label, 120.0),
        ("artifact_gc_collections", label, 5.0),
    ]
    assert Target.objects.get().kind == TargetKind.ARTIFACTS


@pytest.mark.django_db
def test_a_deleted_artifact_leaves_no_evidence(team):
    deployment = builders.deployment(team)
    kept = _analysed(deployment)
    gone = _analysed(deployment, captured_at=T0 + timedelta(minutes=1))
    gone.delete()
    view = load_observations(deployment.id, {GC_PAUSE: 3600}, T0 + timedelta(minutes=5))
    assert [labels for labels, _ in view[("artifact", GC_PAUSE)]] == [
        f"artifact={str(kept.pk)[:8]}"
    ]
    # With its deployment, everything goes (the targets take their observations along).
    deployment.delete()
    assert not Observation.objects.exists()
