"""Analysed artifacts' signals as observations (issue 13: one read path for evaluation).

Until now evaluation read ``Artifact.signals`` through a second reader; new analyses write
their signals as observations (``artifacts.evidence``). This writes them for the
artifacts analysed before, so old investigations keep their evidence: one series per
artifact (``artifact=<first 8 of its id>``) at ``captured_at``, on the deployment's one
target of the stored ``artifacts`` kind, exactly what the reader gave. Idempotent (the
observation's unique key); frozen here rather than imported, as migrations must be.
"""

import re

from django.db import migrations

KIND = "artifacts"
SIGNAL = re.compile(r"^artifact_[a-z0-9_]+$")  # probes.kinds.ARTIFACT's signals
SIGNAL_MAX = 64
BATCH = 2000


def forwards(apps, schema_editor):
    Artifact = apps.get_model("artifacts", "Artifact")
    Target = apps.get_model("probes", "Target")
    Observation = apps.get_model("probes", "Observation")
    targets: dict = {}
    batch = []
    done = Artifact.objects.filter(status="done").order_by("pk")
    for pk, deployment_id, captured_at, signals in done.values_list(
        "pk", "deployment_id", "captured_at", "signals"
    ).iterator(chunk_size=BATCH):
        for name, value in (signals or {}).items():
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or len(name) > SIGNAL_MAX
                or not SIGNAL.match(name)
            ):
                continue
            if deployment_id not in targets:
                targets[deployment_id] = Target.objects.get_or_create(
                    deployment_id=deployment_id, kind=KIND
                )[0].pk
            batch.append(
                Observation(
                    target_id=targets[deployment_id],
                    taken_at=captured_at,
                    signal=name,
                    labels=f"artifact={str(pk)[:8]}",
                    value=float(value),
                )
            )
        if len(batch) >= BATCH:
            Observation.objects.bulk_create(batch, ignore_conflicts=True)
            batch = []
    Observation.objects.bulk_create(batch, ignore_conflicts=True)


def backwards(apps, schema_editor):
    # Before this, artifact signals were read from the artifact rows: the store goes.
    apps.get_model("probes", "Target").objects.filter(kind=KIND).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("artifacts", "0002_artifact_deployment_moved"),
        ("probes", "0006_kinds_from_registry_and_stored_targets"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
