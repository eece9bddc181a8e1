"""The deployment foreign key follows the model to the deployments app (same table)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("probes", "0004_alter_target_kind"),
        ("deployments", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="target",
                    name="deployment",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="targets",
                        to="deployments.deployment",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
