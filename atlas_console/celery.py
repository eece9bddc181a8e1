"""The one Celery app. Configuration lives in Django settings under the CELERY_ prefix."""

import gc
import logging
import os

from celery import Celery, signals

from atlas_console import gc_policy

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")

# amqp: kombu connections that survive the cleanup after a lost broker (atlas_console.broker).
app = Celery("atlas_console", amqp="atlas_console.broker:AMQP")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
@signals.worker_process_init.connect
def _tune_gc(**_: object) -> None:
    """Each worker process (the main one before a prefork pool forks, then each child
    after its init) freezes its start-up heap and collects young cycles less often: the
    collector took ~20 % of a poll cycle's CPU (``atlas_console.gc_policy``)."""
    thresholds = gc_policy.tune_for_worker()
    logging.getLogger("atlas.gc").info(
        "gc: %d start-up objects frozen, thresholds %s", gc.get_freeze_count(), thresholds
    )
