"""The broker (Redis) stopped and restarted during an investigation.

Real processes: gunicorn, a Celery worker and beat, all on a private ``redis-server``
without persistence (a restart loses every queued message) and on the test database.
While Redis is down the pages keep answering and say that probes are paused; once it is
back, polling resumes by itself, and no observation is lost or stored twice.
"""

from __future__ import annotations

from django.db.models import Count
from django.urls import reverse
from django.utils import timezone

from investigations import actions
from probes.models import Observation, Poll, Target, TargetKind
from tests.faults.conftest import session_cookie
from tests.support import builders
from tests.support.hostile import hostile_server
from tests.support.services import (
    celery_beat_args,
    celery_worker_args,
    free_port,
    gunicorn_args,
    http_get,
    product_env,
    product_process,
    tail,
    wait_for_http,
    wait_until,
)
from tests.support.workers import database_url

INTERVAL_S = 2
LOGS = ("web", "worker", "beat")


def _polls(target) -> int:
    return Poll.objects.filter(target=target).count()


def test_pages_say_paused_while_redis_is_down_and_polling_resumes_by_itself(
    transactional_db, team, commander, private_redis, tmp_path
):
    deployment = builders.deployment(team, "atlas-broker-fault", poll_interval_s=INTERVAL_S)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )
    cookie = session_cookie(commander)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    page = base + reverse("investigations:detail", args=[investigation.pk])
    tree = base + reverse("investigations:tree", args=[investigation.pk])
    strip = base + reverse("workers_partial")
    environment = product_env(
        database_url=database_url(),
        broker_url=private_redis.url,
        data_dir=tmp_path,
        extra={"ATLAS_HEARTBEAT_SECONDS": "1", "ATLAS_PROBE_TIMEOUT": "1"},
    )
    with hostile_server() as engine:
        target = Target.objects.create(
            deployment=deployment, kind=TargetKind.ENGINE, url=engine + "/metrics"
        )
        with (
            product_process("web", gunicorn_args(port, workers=1), environment, tmp_path),
            product_process("worker", celery_worker_args(), environment, tmp_path),
            product_process("beat", celery_beat_args(tmp_path), environment, tmp_path),
        ):
            assert wait_for_http(base), tail(tmp_path, *LOGS)
            assert wait_until(lambda: _polls(target) >= 3, 60), tail(tmp_path, *LOGS)
            assert wait_until(lambda: "probes running" in http_get(strip, cookie)[1], 30)

            private_redis.stop()
            stopped_at = timezone.now()
            # The pages never needed the broker: they answer, and the strip says why no
            # evidence is arriving.
            assert wait_until(lambda: "probes paused" in http_get(strip, cookie)[1], 30), http_get(
                strip, cookie
            )[1] + tail(tmp_path, *LOGS)
            status, body = http_get(page, cookie)
            assert status == 200 and investigation.title in body
            assert http_get(tree, cookie)[0] == 200
            paused_strip = http_get(strip, cookie)[1]
            before = set(Poll.objects.filter(target=target).values_list("cycle_at", flat=True))
            observed_before = Observation.objects.filter(target=target).count()

            private_redis.start()
            restarted_at = timezone.now()
            resumed = wait_until(
                lambda: (
                    Poll.objects.filter(target=target, recorded_at__gt=restarted_at).count() >= 3
                ),
                90,
            )
            assert resumed, tail(tmp_path, *LOGS)
            assert wait_until(lambda: "probes running" in http_get(strip, cookie)[1], 30)

    assert "broker unreachable" in paused_strip
    # Nothing lost: every cycle stored before the outage is still there, with its values.
    after = set(Poll.objects.filter(target=target).values_list("cycle_at", flat=True))
    assert before <= after
    assert Observation.objects.filter(target=target).count() >= observed_before
    # Nothing twice, nothing half-stored: each poll has exactly the scrape's two series (beside
    # the evidence span recorded from the second cycle on), and none exists without its poll.
    per_cycle = dict(
        Observation.objects.filter(target=target, signal__in=("kv_cache_usage", "requests_waiting"))
        .values_list("taken_at")
        .annotate(n=Count("id"))
        .values_list("taken_at", "n")
    )
    ok_cycles = set(Poll.objects.filter(target=target, ok=True).values_list("cycle_at", flat=True))
    assert set(per_cycle) == ok_cycles
    assert set(per_cycle.values()) == {2}
    # The outage shows as a gap in cycles, not as polls stored late under old cycles.
    gap = [c for c in after - before if stopped_at <= c < restarted_at]
    assert len(gap) <= 1, gap
