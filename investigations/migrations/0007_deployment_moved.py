"""Deployment now lives in the deployments app; the table and its rows stay where they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("investigations", "0006_deployment_sm_clock_mhz"),
        ("deployments", "0001_initial"),
        # Every foreign key must point at the new model before the old one leaves the state.
        ("probes", "0005_target_deployment_moved"),
        ("artifacts", "0002_artifact_deployment_moved"),
        ("drills", "0002_drillrange_deployment_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="investigation",
                    name="deployment",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="investigations",
                        to="deployments.deployment",
                    ),
                ),
                migrations.DeleteModel(name="Deployment"),
            ],
            database_operations=[],
        ),
    ]
