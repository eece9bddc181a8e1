"""The poll task end to end in-process: claim, fetch over real HTTP, observe, store once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from deployments.models import Deployment
from probes.models import Observation, Poll, Target, TargetKind
from probes.tasks import enqueue_due, poll_deployment
from tests.support.hostile import hostile_server

CYCLE = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)


@pytest.fixture
def server():
    with hostile_server() as base:
        yield base


def _target(deployment, url, kind=TargetKind.ENGINE):
    return Target.objects.create(deployment=deployment, kind=kind, url=url)


@pytest.mark.django_db(transaction=True)
def test_a_cycle_is_stored_once_even_when_the_task_runs_twice(deployment, server, settings):
    settings.ATLAS_PROBE_TIMEOUT = 2
    good = _target(deployment, server + "/metrics")
    hung = _target(deployment, server + "/hang")
    huge = _target(deployment, server + "/redirect-metadata")
    poll_deployment.apply(args=[str(deployment.pk), CYCLE.isoformat()], task_id="t-1")
    poll_deployment.apply(args=[str(deployment.pk), CYCLE.isoformat()], task_id="t-1")
    assert Poll.objects.filter(cycle_at=CYCLE).count() == 3
    assert Poll.objects.get(target=good).ok
    values = dict(Observation.objects.filter(target=good).values_list("signal", "value"))
    assert values == {"requests_waiting": 47.0, "kv_cache_usage": 0.94}
    for target, kind in ((hung, "timeout"), (huge, "redirect")):
        target.refresh_from_db()
        assert target.last_error_kind == kind
        assert target.consecutive_failures == 1
    # Claims are released when the task ends.
    assert not Target.objects.exclude(claim_task="").exists()


@pytest.mark.django_db(transaction=True)
def test_a_chunk_dripping_target_does_not_cost_its_neighbours_their_cycle(
    deployment, server, settings
):
    """Issue 19.1: one good target plus one streaming endless 1-byte chunks stored 0 of ~18
    cycles; the good target's cycle is stored and the drip is a timeout on its own strip."""
    settings.ATLAS_PROBE_TIMEOUT = 2
    good = _target(deployment, server + "/metrics")
    drip = _target(deployment, server + "/drip-chunked")
    poll_deployment.apply(args=[str(deployment.pk), CYCLE.isoformat()], task_id="t-drip")
    assert Poll.objects.get(target=good, cycle_at=CYCLE).ok
    values = dict(Observation.objects.filter(target=good).values_list("signal", "value"))
    assert values == {"requests_waiting": 47.0, "kv_cache_usage": 0.94}
    drip.refresh_from_db()
    assert drip.last_error_kind == "timeout"


@pytest.mark.django_db(transaction=True)
def test_an_offset_past_64_bits_fails_its_target_and_spares_the_others(deployment, server):
    """Issue 19.2: ``X-Log-Next-Offset: 99999999999999999999999`` raised OverflowError in
    every poll of the deployment and the good engine target stored nothing."""
    good = _target(deployment, server + "/metrics")
    relay = _target(deployment, server + "/log-huge-offset", kind=TargetKind.LOG_HTTP)
    Target.objects.filter(pk=relay.pk).update(log_offset=120)
    poll_deployment.apply(args=[str(deployment.pk), CYCLE.isoformat()], task_id="t-offset")
    assert Poll.objects.get(target=good, cycle_at=CYCLE).ok
    assert Observation.objects.filter(target=good).count() == 2
    relay.refresh_from_db()
    assert (relay.last_error_kind, relay.log_offset) == ("bad-offset", 120)
    assert "99999999999999999999999" in relay.last_error
    assert not Poll.objects.get(target=relay, cycle_at=CYCLE).ok


class Sent:
    """Stands in for the HTTP poll task the layer above hands to ``enqueue_due``."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, dict]] = []

    def apply_async(self, args, **options) -> None:
        self.calls.append((args, options))


@pytest.mark.django_db
def test_idle_deployments_get_the_light_cadence_and_active_ones_their_own(
    deployment, server, settings
):
    """No investigation open: the light cadence, sent as the store-only task (evaluation
    happens only where an investigation is open), Prometheus left to its own history."""
    from probes.cycles import cycle_start

    settings.ATLAS_LIGHT_POLL_SECONDS = 30
    _target(deployment, server + "/ok")
    now = timezone.now()
    light, sent = Sent(), Sent()
    assert enqueue_due(now, http_poll=sent, light_poll=light) == 1
    assert sent.calls == []
    ((args, options),) = light.calls
    assert args == [str(deployment.pk), cycle_start(now, 30).isoformat()]
    assert options["expires"] == 60
    Deployment.objects.filter(pk=deployment.pk).update(polling_active=True)
    assert enqueue_due(now, http_poll=sent, light_poll=light) == 1
    ((args, options),) = sent.calls
    assert args == [str(deployment.pk), cycle_start(now, deployment.poll_interval_s).isoformat()]
    assert options["expires"] == 2 * deployment.poll_interval_s


@pytest.mark.django_db
def test_light_polling_leaves_prometheus_out_and_can_be_turned_off(deployment, settings):
    from probes.dispatch import due_polls

    Target.objects.create(
        deployment=deployment, kind=TargetKind.PROMETHEUS, url="http://127.0.0.1:9"
    )
    settings.ATLAS_LIGHT_POLL_SECONDS = 30
    assert due_polls(timezone.now()) == []  # Prometheus alone: backfilled at open instead
    _target(deployment, "http://127.0.0.1:9/metrics")
    assert [d.light for d in due_polls(timezone.now())] == [True]
    settings.ATLAS_LIGHT_POLL_SECONDS = 0
    assert due_polls(timezone.now()) == []


@pytest.mark.django_db(transaction=True)
def test_a_light_poll_stores_the_engine_and_skips_prometheus(deployment, server):
    from probes.tasks import poll_light

    engine = _target(deployment, server + "/metrics")
    prom = Target.objects.create(
        deployment=deployment, kind=TargetKind.PROMETHEUS, url="http://127.0.0.1:9"
    )
    assert poll_light.apply(args=[str(deployment.pk), CYCLE.isoformat()]).get() == 1
    assert list(Poll.objects.values_list("target_id", flat=True)) == [engine.pk]
    assert not Poll.objects.filter(target=prom).exists()


@pytest.mark.django_db
def test_a_cycle_already_polled_is_not_dispatched_again(
    make_deployment, django_assert_max_num_queries
):
    from probes.cycles import cycle_start
    from probes.dispatch import due_polls

    now = timezone.now()
    done, todo = (make_deployment(n, polling_active=True) for n in ("done", "todo"))
    for deployment in (done, todo):
        _target(deployment, "http://127.0.0.1:9/metrics")
    polled = Target.objects.get(deployment=done)
    Poll.objects.create(target=polled, cycle_at=cycle_start(now, done.poll_interval_s), ok=True)
    with django_assert_max_num_queries(3):
        due = due_polls(now)
    assert [d.deployment_id for d in due] == [todo.pk]
