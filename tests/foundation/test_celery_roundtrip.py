"""A real Celery worker process consumes a real task from a real broker and writes to the
test database: the path every probe takes."""

from __future__ import annotations

import time
import uuid

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kombu import Connection

from atlas_console import gc_policy
from probes.models import WorkerHeartbeat
from probes.tasks import record_heartbeat
from tests.support.workers import broker_for, celery_worker, wait_for


@pytest.fixture(params=["embedded", "redis"])
def broker(request, tmp_path):
    return broker_for(request.param, tmp_path)


@pytest.fixture
def worker(broker, transactional_db, tmp_path):
    url, options, worker_env = broker
    with celery_worker(worker_env, tmp_path) as (queue, process):
        yield url, options, queue, process


def test_a_worker_processes_a_task_through_the_real_broker(worker, tmp_path):
    url, options, queue, process = worker
    tick = uuid.uuid4()
    with Connection(url, transport_options=options) as conn:
        record_heartbeat.apply_async(
            kwargs={"tick": str(tick), "sent_at": timezone.now().isoformat()},
            queue=queue,
            connection=conn,
        )
    arrived = wait_for(lambda: WorkerHeartbeat.objects.filter(tick=tick).exists(), 60)
    log = (tmp_path / "worker.log").read_text()
    assert arrived, f"no heartbeat within 60 s; worker exit={process.poll()}\n{log[-3000:]}"
    beat = WorkerHeartbeat.objects.get(tick=tick)
    assert beat.hostname.startswith(queue)
    assert beat.queue == queue
    # The worker's processes run under the product's collector policy (gc_policy).
    assert f"thresholds ({gc_policy.YOUNG_THRESHOLD}, " in log, log[-3000:]


def test_redelivering_the_same_tick_records_it_once(worker):
    url, options, queue, _ = worker
    tick = uuid.uuid4()
    with Connection(url, transport_options=options) as conn:
        for _ in range(3):
            record_heartbeat.apply_async(
                kwargs={"tick": str(tick), "sent_at": timezone.now().isoformat()},
                queue=queue,
                connection=conn,
            )
    assert wait_for(lambda: WorkerHeartbeat.objects.filter(tick=tick).exists(), 60)
    time.sleep(2)  # give the duplicates time to be consumed too
    assert WorkerHeartbeat.objects.filter(tick=tick).count() == 1


def test_tasks_enqueued_inside_a_transaction_wait_for_the_commit(
    django_capture_on_commit_callbacks, db, monkeypatch
):
    # Records the publish instead of sending it: what matters here is *when* it happens.
    published = []
    monkeypatch.setattr(record_heartbeat, "apply_async", lambda *a, **kw: published.append(kw))
    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        record_heartbeat.delay_on_commit(tick=str(uuid.uuid4()))
        assert published == []
    assert len(callbacks) == 1
    assert len(published) == 1


def test_celery_is_configured_for_at_least_once_delivery():
    from atlas_console.celery import app

    conf = app.conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_serializer == "json" and conf.accept_content == ["json"]
    assert conf.result_backend is None and conf.task_ignore_result
    assert conf.task_soft_time_limit < conf.task_time_limit
    if not settings.ATLAS_EMBEDDED_BROKER:
        assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit
