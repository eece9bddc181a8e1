"""What the probe workers record about themselves."""

from __future__ import annotations

import uuid

from django.db import models

from probes import kinds


class WorkerHeartbeat(models.Model):
    """One row per beat tick that a worker executed.

    Pages read the newest row to tell the commander whether evidence is still
    flowing ("probes paused" when the broker or every worker is down). The tick
    id is unique, so a redelivered task cannot record the same beat twice.
    """

    tick = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    hostname = models.CharField(max_length=255)
    queue = models.CharField(max_length=100, blank=True)
    sent_at = models.DateTimeField(help_text="When the beat was scheduled (from the message).")
    recorded_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-recorded_at"]

    def __str__(self) -> str:
        return f"{self.hostname} at {self.recorded_at:%H:%M:%S}"


# One choice per entry of the probe-kind registry (probes/kinds.py), named after its
# value (``TargetKind.LOG_HTTP == "log_http"``); the registry says everything else.
TargetKind = models.TextChoices(
    "TargetKind", [(k.value.upper(), (k.value, k.label)) for k in kinds.KINDS]
)

# Kinds fetched over HTTP by the shared pollers; the host ones run on a per-host queue.
HTTP_KINDS = kinds.values(runs=kinds.Runs.POLLER)
HOST_KINDS = kinds.values(runs=kinds.Runs.HOST)
# Fetched only when someone asks (a trace or a snapshot is big and perturbs the engine).
ON_DEMAND_KINDS = kinds.values(runs=kinds.Runs.ON_DEMAND)
# Written by the console itself (one target per deployment), never polled or shown.
STORED_KINDS = kinds.stored_values()
PROBED_KINDS = kinds.probed_values()
# Kinds that are not fetched from a URL (read on their host, or written by the console).
URL_FREE_KINDS = tuple(k.value for k in kinds.KINDS if kinds.Needs.URL not in k.needs)


class TargetQuerySet(models.QuerySet):
    def probed(self) -> TargetQuerySet:
        """The probe targets people registered: what the health strip, the deployment's
        target table and its count show (not the console's store of artifact signals)."""
        return self.filter(kind__in=PROBED_KINDS)


class Target(models.Model):
    """Something a probe reads, and how its last reads went (the probe health strip)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    deployment = models.ForeignKey(
        "deployments.Deployment", on_delete=models.CASCADE, related_name="targets"
    )
    kind = models.CharField(max_length=16, choices=kinds.choices)
    url = models.URLField(max_length=500, blank=True)
    path = models.CharField(max_length=500, blank=True, help_text="Log file path (log_file).")
    host_queue = models.CharField(
        max_length=100, blank=True, help_text="Celery queue of the worker on the GPU host."
    )
    replica = models.CharField(max_length=100, blank=True)
    queries = models.JSONField(
        default=dict,
        blank=True,
        help_text="Prometheus targets: signal name -> PromQL, evaluated each cycle.",
    )
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    # Claim: the poll task that owns this target's current cycle (redelivery keeps it).
    claim_task = models.CharField(max_length=64, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    log_offset = models.BigIntegerField(default=0)

    last_polled_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    last_error_kind = models.CharField(max_length=32, blank=True)
    last_error_transient = models.BooleanField(default=False)
    last_latency_ms = models.FloatField(null=True, blank=True)
    last_size_bytes = models.PositiveIntegerField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)

    objects = TargetQuerySet.as_manager()

    class Meta:
        ordering = ["deployment", "kind", "replica"]
        constraints = [
            # A stored kind's target is found by (deployment, kind): one, however many
            # analyses finish at once.
            models.UniqueConstraint(
                fields=["deployment", "kind"],
                condition=models.Q(kind__in=STORED_KINDS),
                name="one_stored_target_per_deployment",
            ),
            models.CheckConstraint(
                # Every kind that needs a URL has one. Written as the exemption, so a new
                # HTTP kind (the common addition) changes no constraint.
                condition=models.Q(kind__in=URL_FREE_KINDS) | ~models.Q(url=""),
                name="target_has_url_when_its_kind_needs_one",
            ),
            models.CheckConstraint(
                condition=~models.Q(kind__in=HOST_KINDS) | ~models.Q(host_queue=""),
                name="host_target_has_queue",
            ),
        ]

    def __str__(self) -> str:
        where = self.url or f"{self.host_queue}:{self.path}"
        return f"{self.get_kind_display()} {self.replica} {where}".strip()


class Poll(models.Model):
    """One read of one target in one cycle. (target, cycle_at) is the idempotency key:
    a redelivered task finds the row and writes nothing twice."""

    target = models.ForeignKey(Target, on_delete=models.CASCADE, related_name="polls")
    cycle_at = models.DateTimeField()
    ok = models.BooleanField()
    error_kind = models.CharField(max_length=32, blank=True)
    error = models.CharField(max_length=500, blank=True)
    transient = models.BooleanField(default=False)
    latency_ms = models.FloatField(null=True)
    size_bytes = models.PositiveIntegerField(null=True)
    snapshot = models.JSONField(
        default=dict, help_text="Canonical counters and histogram buckets, for windowed stats."
    )
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-cycle_at"]
        constraints = [
            models.UniqueConstraint(fields=["target", "cycle_at"], name="one_poll_per_cycle")
        ]
        indexes = [models.Index(fields=["target", "-cycle_at"], name="poll_target_recent")]

    def __str__(self) -> str:
        return (
            f"{self.target_id} at {self.cycle_at:%H:%M:%S}: {'ok' if self.ok else self.error_kind}"
        )


class Observation(models.Model):
    """One value of one signal at one time: the narrow table charts and evaluation read."""

    target = models.ForeignKey(Target, on_delete=models.CASCADE, related_name="observations")
    taken_at = models.DateTimeField()
    signal = models.CharField(max_length=64)
    labels = models.CharField(max_length=200, blank=True)
    value = models.FloatField()
    # A windowed quantile's bucket (the value is interpolated inside it), kept in the
    # quantile's own row: read back as the ``<signal>_lo`` / ``<signal>_hi`` series
    # (``investigations.observations``). As rows of their own they were 54 of an engine's
    # ~126 a cycle, and the unique index's insert was most of PostgreSQL's share of a poll.
    lo = models.FloatField(null=True, blank=True)
    hi = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["target", "signal", "labels", "taken_at"], name="one_value_per_series_time"
            )
        ]
        # The unique constraint's index (target, signal, labels, taken_at) also serves the
        # chart and evaluation queries, which filter by target and signal over a time range.

    def __str__(self) -> str:
        return f"{self.signal}{{{self.labels}}} = {self.value:g} at {self.taken_at:%H:%M:%S}"
