"""Deployments: what a team serves, and the budget constants its arithmetic needs.

This app sits below probes and investigations: a deployment exists before anything
polls it or anyone investigates it, so nothing here imports either of them. The budget
fields take their defaults from ``deployments.budget.Budget`` (the seed playbook's
"Atlas" deployment), the one place those numbers are written down.
"""

from __future__ import annotations

import uuid

from django.core.validators import MinValueValidator
from django.db import models

from deployments.budget import Budget
from teams.models import Team

DEFAULTS = Budget()


class Engine(models.TextChoices):
    VLLM = "vllm", "vLLM"
    SGLANG = "sglang", "SGLang"


class Deployment(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="deployments")
    name = models.CharField(max_length=100)
    engine = models.CharField(max_length=16, choices=Engine.choices, default=Engine.VLLM)
    model_name = models.CharField(max_length=200, blank=True)
    poll_interval_s = models.PositiveIntegerField(default=5, validators=[MinValueValidator(1)])
    created = models.DateTimeField(auto_now_add=True)
    polling_active = models.BooleanField(
        default=False,
        editable=False,
        help_text="Probes poll it each cycle (kept true while an investigation is open on it).",
    )

    # Budget constants: every deployment carries its own (defaults: deployments.budget).
    weights_gb = models.FloatField(
        default=DEFAULTS.weights_gb, help_text="Model weights, GB (all ranks)."
    )
    tp_size = models.PositiveSmallIntegerField(
        default=DEFAULTS.tp_size, validators=[MinValueValidator(1)]
    )
    kv_budget_gib_per_rank = models.FloatField(default=DEFAULTS.kv_budget_gib_per_rank)
    gpu_memory_gib_per_rank = models.FloatField(default=DEFAULTS.gpu_memory_gib_per_rank)
    kv_bytes_per_token = models.PositiveIntegerField(default=DEFAULTS.kv_bytes_per_token)
    prefill_ms_per_token = models.FloatField(default=DEFAULTS.prefill_ms_per_token)
    decode_step_ms = models.FloatField(default=DEFAULTS.decode_step_ms)
    max_num_batched_tokens = models.PositiveIntegerField(default=DEFAULTS.max_num_batched_tokens)
    max_num_seqs = models.PositiveIntegerField(default=DEFAULTS.max_num_seqs)
    ttft_target_ms = models.FloatField(default=DEFAULTS.ttft_target_ms)
    itl_ceiling_ms = models.FloatField(default=DEFAULTS.itl_ceiling_ms)
    queue_baseline_low = models.PositiveIntegerField(default=DEFAULTS.queue_baseline_low)
    queue_baseline_high = models.PositiveIntegerField(default=DEFAULTS.queue_baseline_high)
    sm_clock_mhz = models.FloatField(
        default=DEFAULTS.sm_clock_mhz,
        help_text="Full SM clock under load, MHz (A100 1,410; H100 SXM 1,980).",
    )

    class Meta:
        # The table predates this app (the model moved from investigations); keeping its
        # name let existing databases migrate without copying a row.
        db_table = "investigations_deployment"
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="deployment_name_per_team")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def budget(self) -> Budget:
        return Budget.of(self)


class ControllerKind(models.TextChoices):
    """Engines Atlas runs itself and may change on the commander's "Apply fix"
    (investigations.controllers has one implementation per kind)."""

    ENGINESIM = "enginesim", "enginesim (the simulator: demo, drill range)"


class EngineController(models.Model):
    """How Atlas applies a fix to a deployment it runs itself. A deployment without one is
    production: the commander applies the fix and records it, Atlas changes nothing."""

    deployment = models.OneToOneField(
        Deployment, on_delete=models.CASCADE, related_name="controller", primary_key=True
    )
    kind = models.CharField(max_length=32, choices=ControllerKind.choices)
    url = models.URLField(max_length=200, help_text="Base URL of the controlled engine.")
    shows_clock = models.BooleanField(
        default=False,
        help_text="Show the simulator's incident clock to the team (the demo; never a drill "
        "range, where the incident's timing is part of the ground truth).",
    )

    def __str__(self) -> str:
        return f"{self.get_kind_display()} at {self.url}"
