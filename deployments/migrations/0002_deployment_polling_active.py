from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="polling_active",
            field=models.BooleanField(
                default=False,
                editable=False,
                help_text=(
                    "Probes poll it each cycle (kept true while an investigation is open on it)."
                ),
            ),
        ),
    ]
