"""Claims and idempotent writes: what makes a redelivered poll harmless."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from probes.cycles import cycle_start
from probes.models import Observation, Poll, Target, TargetKind
from probes.store import PollOutcome, already_polled, claim_targets, record_cycle, release_targets
from tests.support import builders

CYCLE = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)


@pytest.fixture
def targets(team):
    deployment = builders.deployment(team)
    return [
        builders.target(deployment, TargetKind.ENGINE, f"http://127.0.0.1:81{i}/metrics")
        for i in range(3)
    ]


def test_cycles_are_a_shared_grid():
    assert cycle_start(datetime(2026, 1, 1, 0, 0, 7, 900, tzinfo=UTC), 5) == datetime(
        2026, 1, 1, 0, 0, 5, tzinfo=UTC
    )
    with pytest.raises(ValueError):
        cycle_start(CYCLE, 0)


def test_a_claim_is_exclusive_until_its_lease_runs_out(targets):
    ids = [t.pk for t in targets]
    now = CYCLE
    assert set(claim_targets(ids, "task-a", lease=timedelta(seconds=90), now=now)) == set(ids)
    assert claim_targets(ids, "task-b", lease=timedelta(seconds=90), now=now) == []
    later = now + timedelta(seconds=91)
    assert set(claim_targets(ids, "task-b", lease=timedelta(seconds=90), now=later)) == set(ids)


def test_a_redelivered_task_keeps_its_own_claim(targets):
    ids = [t.pk for t in targets]
    claim_targets(ids, "task-a", lease=timedelta(seconds=90), now=CYCLE)
    again = claim_targets(ids, "task-a", lease=timedelta(seconds=90), now=CYCLE)
    assert set(again) == set(ids)
    release_targets(ids, "task-a")
    assert Target.objects.filter(claim_task="").count() == 3


def _outcomes(targets, value=1.0):
    return [
        PollOutcome(
            target_id=t.pk,
            ok=True,
            latency_s=0.004,
            size_bytes=1200,
            snapshot={"counters": {"preemptions_total": 3}},
            observations=[("requests_waiting", "", value), ("kv_cache_usage", "engine=0", 0.94)],
        )
        for t in targets
    ]


def test_recording_a_cycle_twice_writes_each_row_once(targets):
    assert record_cycle(CYCLE, _outcomes(targets)) == 3
    assert record_cycle(CYCLE, _outcomes(targets, value=99.0)) == 0
    assert Poll.objects.count() == 3
    assert Observation.objects.count() == 6
    # The first write wins: a replay cannot change recorded evidence.
    assert set(
        Observation.objects.filter(signal="requests_waiting").values_list("value", flat=True)
    ) == {1.0}
    assert already_polled([t.pk for t in targets], CYCLE) == {t.pk for t in targets}


def test_overlong_labels_are_stored_distinct_and_within_the_column(targets):
    """A hostile hostname or label value longer than the column (PostgreSQL refuses it,
    SQLite would not notice) must not fail the cycle nor merge two series."""
    host = "h" * 300
    outcome = PollOutcome(
        target_id=targets[0].pk,
        ok=True,
        observations=(
            ("gpu_util", f"gpu=0,host={host}", 1.0),
            ("gpu_util", f"gpu=1,host={host}", 2.0),
            ("gpu_util", "gpu=2", 3.0),
        ),
    )
    assert record_cycle(CYCLE, [outcome]) == 1
    labels = list(Observation.objects.order_by("value").values_list("labels", flat=True))
    assert len(set(labels)) == 3 and all(len(text) <= 200 for text in labels)
    assert labels[0].startswith("gpu=0,host=hhh") and labels[2] == "gpu=2"


def test_failures_are_visible_on_the_target(targets):
    target = targets[0]
    outcome = PollOutcome(
        target_id=target.pk, ok=False, latency_s=3.0, error_kind="timeout",
        error="timeout: no answer in time", transient=True,
    )  # fmt: skip
    record_cycle(CYCLE, [outcome])
    record_cycle(CYCLE + timedelta(seconds=5), [outcome])
    target.refresh_from_db()
    assert target.last_error_kind == "timeout" and target.last_error_transient
    assert target.consecutive_failures == 2
    assert target.last_success_at is None
    record_cycle(CYCLE + timedelta(seconds=10), _outcomes([target]))
    target.refresh_from_db()
    assert target.consecutive_failures == 0 and target.last_success_at is not None
    assert target.last_size_bytes == 1200


def test_a_cycle_costs_a_bounded_number_of_queries(team, django_assert_max_num_queries):
    deployment = builders.deployment(team, "atlas-fleet")
    many = Target.objects.bulk_create(
        Target(deployment=deployment, kind=TargetKind.ENGINE, url=f"http://127.0.0.1:9/{i}")
        for i in range(60)
    )
    outcomes = _outcomes(many[:40]) + [
        PollOutcome(target_id=t.pk, ok=False, error_kind="timeout", error="timeout", transient=True)
        for t in many[40:]
    ]
    with django_assert_max_num_queries(10):
        assert record_cycle(CYCLE, outcomes) == 60
    assert Target.objects.filter(consecutive_failures=1).count() == 20
    assert Target.objects.filter(last_success_at__isnull=False).count() == 40


def test_observation_values_and_texts_are_stored_exactly(targets):
    """The PostgreSQL insert sends columns as joined text: every float keeps its bits, a
    text holding the separator and a lone row with empty labels are stored as given."""
    values = [0.1 + 0.2, 1e-300, 123456789.12345679, -2.5e18, 5e-324, 7]
    many = PollOutcome(
        target_id=targets[0].pk,
        ok=True,
        observations=[(f"s{i}", "", v) for i, v in enumerate(values)],
    )
    odd = PollOutcome(
        target_id=targets[1].pk,
        ok=True,
        observations=[("a", "gpu=0\x1fhost=x", 1.0), ("a", "gpu=1", 2.0)],
    )
    lone = PollOutcome(target_id=targets[2].pk, ok=True, observations=[("b", "", 3.0)])
    for batch in ([many, odd, lone], [lone], [odd]):
        Observation.objects.all().delete()
        Poll.objects.all().delete()
        record_cycle(CYCLE, batch)
        stored = set(Observation.objects.values_list("target_id", "signal", "labels", "value"))
        expected = {
            (o.target_id, s, labels, float(v)) for o in batch for s, labels, v in o.observations
        }
        assert stored == expected


def test_snapshots_are_stored_as_given(targets):
    """On PostgreSQL the cycle's snapshots travel as one separator-joined text (psycopg's
    text[] dumper escaped every quote through a Python callback): quotes, backslashes, a
    separator or control character inside a value, non-ASCII text and a lone poll all
    come back equal."""
    awkward = {
        "note": 'say "hi" \\ \x1f \x07 \n tab\t',
        "name": 'vllm:kv_cache_usage_perc{engine="0"}',
        "unicode": "Grüße 🚀",
        "nested": {"buckets": [[0.005, 1.0], ["+Inf", 3.0]], "empty": {}},
    }
    snapshots = [awkward, {}, {"counters": {"a": 1.5}}]
    outcomes = [
        PollOutcome(target_id=t.pk, ok=True, snapshot=s)
        for t, s in zip(targets, snapshots, strict=True)
    ]
    for batch in (outcomes, outcomes[:1]):
        Poll.objects.all().delete()
        record_cycle(CYCLE, batch)
        stored = dict(Poll.objects.values_list("target_id", "snapshot"))
        assert stored == {o.target_id: o.snapshot for o in batch}


def test_quantile_bounds_ride_in_their_quantiles_row_and_read_back_as_their_own_series(targets):
    """54 of an engine's ~126 rows a cycle were bucket bounds: they are stored in their
    quantile's row (``lo`` / ``hi``) and read back by name, each within its own window; a
    bound with no quantile before it, a ``_max_hi`` (no quantile of that name) and a bound
    stored as a row of its own (older rows) are read as they always were."""
    from investigations.observations import load_observations

    deployment = targets[0].deployment
    packed = [
        ("ttft_p95", "", 0.3), ("ttft_p95_lo", "", 0.25), ("ttft_p95_hi", "", 0.5),
        ("itl_p99", "engine=0", 0.04), ("itl_p99_lo", "engine=0", 0.025),  # no _hi: +Inf bucket
        ("itl_p50_hi", "", 0.01),  # its quantile is not in the cycle
        ("output_batch_tokens_max_hi", "", 2048.0), ("kv_cache_usage", "", 0.9),
    ]  # fmt: skip
    lone = PollOutcome(target_id=targets[1].pk, ok=True, observations=[("ttft_p95", "", 0.7),
                       ("ttft_p95_lo", "", 0.5), ("ttft_p95_hi", "", 0.75)])  # fmt: skip
    for batch in (
        [PollOutcome(target_id=targets[0].pk, ok=True, observations=packed), lone],
        [lone],  # one target: the PostgreSQL insert's arrays, not its joined text
    ):
        Observation.objects.all().delete()
        Poll.objects.all().delete()
        record_cycle(CYCLE, batch)
        rows = {(o.target_id, o.signal, o.labels): (o.value, o.lo, o.hi)
                for o in Observation.objects.all()}  # fmt: skip
        assert rows[(targets[1].pk, "ttft_p95", "")] == (0.7, 0.5, 0.75)
        if len(batch) == 2:
            t = targets[0].pk
            assert rows[(t, "ttft_p95", "")] == (0.3, 0.25, 0.5)
            assert rows[(t, "itl_p99", "engine=0")] == (0.04, 0.025, None)
            assert rows[(t, "itl_p50_hi", "")] == (0.01, None, None)
            assert rows[(t, "output_batch_tokens_max_hi", "")] == (2048.0, None, None)
            assert len(rows) == 5 + 1  # eight observations, three of them bounds packed
    # An older row holding a bound by name, a cycle earlier, and a read 60 s windows wide:
    earlier = CYCLE - timedelta(seconds=5)
    Observation.objects.create(target=targets[1], taken_at=earlier, signal="ttft_p95_lo", value=0.1)
    wanted = {"ttft_p95": 300, "ttft_p95_lo": 60, "ttft_p95_hi": 60, "itl_p99_lo": 60}
    view = load_observations(deployment.id, wanted, CYCLE + timedelta(seconds=1))
    ((_, los),) = view[("engine", "ttft_p95_lo")]
    assert los == [(earlier.timestamp(), 0.1), (CYCLE.timestamp(), 0.5)]
    ((_, his),) = view[("engine", "ttft_p95_hi")]
    assert his == [(CYCLE.timestamp(), 0.75)]
    # Outside its window a bound is not read, though its quantile (wider) still is.
    later = CYCLE + timedelta(seconds=120)
    view = load_observations(deployment.id, wanted, later)
    assert ("engine", "ttft_p95_lo") not in view
    assert view[("engine", "ttft_p95")][0][1] == [(CYCLE.timestamp(), 0.7)]
    # Not asked for, a quantile's bounds do not come back as series.
    assert set(load_observations(deployment.id, {"ttft_p95": 60}, CYCLE)) == {
        ("engine", "ttft_p95")
    }
