"""Deployments with an open investigation are being polled: say so in the new flag."""

from django.db import migrations


def backfill(apps, schema_editor):
    Deployment = apps.get_model("deployments", "Deployment")
    Investigation = apps.get_model("investigations", "Investigation")
    open_on = Investigation.objects.filter(status="open").values("deployment_id")
    Deployment.objects.filter(pk__in=open_on).update(polling_active=True)


class Migration(migrations.Migration):
    dependencies = [
        ("investigations", "0007_deployment_moved"),
        ("deployments", "0002_deployment_polling_active"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
