"""Deployment moves here from investigations: state only, the table keeps its name and rows."""

import uuid

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models


def move_content_type(apps, schema_editor):
    """Admin permissions granted on the old model keep working on the moved one."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label="deployments", model="deployment").exists():
        ContentType.objects.filter(app_label="investigations", model="deployment").update(
            app_label="deployments"
        )


def restore_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label="investigations", model="deployment").exists():
        ContentType.objects.filter(app_label="deployments", model="deployment").update(
            app_label="investigations"
        )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("investigations", "0006_deployment_sm_clock_mhz"),
        ("teams", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Deployment",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        (
                            "engine",
                            models.CharField(
                                choices=[("vllm", "vLLM"), ("sglang", "SGLang")],
                                default="vllm",
                                max_length=16,
                            ),
                        ),
                        ("model_name", models.CharField(blank=True, max_length=200)),
                        (
                            "poll_interval_s",
                            models.PositiveIntegerField(
                                default=5,
                                validators=[django.core.validators.MinValueValidator(1)],
                            ),
                        ),
                        ("created", models.DateTimeField(auto_now_add=True)),
                        (
                            "weights_gb",
                            models.FloatField(
                                default=140.0, help_text="Model weights, GB (all ranks)."
                            ),
                        ),
                        (
                            "tp_size",
                            models.PositiveSmallIntegerField(
                                default=4,
                                validators=[django.core.validators.MinValueValidator(1)],
                            ),
                        ),
                        ("kv_budget_gib_per_rank", models.FloatField(default=35.0)),
                        ("gpu_memory_gib_per_rank", models.FloatField(default=80.0)),
                        ("kv_bytes_per_token", models.PositiveIntegerField(default=327680)),
                        ("prefill_ms_per_token", models.FloatField(default=0.035)),
                        ("decode_step_ms", models.FloatField(default=45.0)),
                        ("max_num_batched_tokens", models.PositiveIntegerField(default=512)),
                        ("max_num_seqs", models.PositiveIntegerField(default=40)),
                        ("ttft_target_ms", models.FloatField(default=600.0)),
                        ("itl_ceiling_ms", models.FloatField(default=150.0)),
                        ("queue_baseline_low", models.PositiveIntegerField(default=3)),
                        ("queue_baseline_high", models.PositiveIntegerField(default=8)),
                        (
                            "sm_clock_mhz",
                            models.FloatField(
                                default=1410.0,
                                help_text=(
                                    "Full SM clock under load, MHz (A100 1,410; H100 SXM 1,980)."
                                ),
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="deployments",
                                to="teams.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "investigations_deployment",
                        "ordering": ["team", "name"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("team", "name"), name="deployment_name_per_team"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, restore_content_type),
    ]
