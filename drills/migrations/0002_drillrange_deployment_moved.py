"""The deployment foreign key follows the model to the deployments app (same table)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("drills", "0001_initial"),
        ("deployments", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="drillrange",
                    name="deployment",
                    field=models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="drill_range",
                        to="deployments.deployment",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
