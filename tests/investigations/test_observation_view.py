"""Evaluation reads each signal only as far back as its window."""

from __future__ import annotations

from datetime import timedelta

from investigations.observations import load_observations, signals_of
from investigations.playbook import playbooks
from probes.models import Observation, TargetKind
from tests.support import builders


def test_each_signal_is_loaded_over_its_own_window(team, django_assert_max_num_queries, frozen_now):
    deployment = builders.deployment(team)
    engine = builders.target(deployment)
    logs = builders.target(deployment, TargetKind.LOG_HTTP, "http://10.0.0.5/logs")
    now = frozen_now
    hours_ago = now - timedelta(hours=20)
    Observation.objects.bulk_create(
        [
            Observation(target=engine, taken_at=hours_ago, signal="kv_cache_usage", value=0.5),
            Observation(target=engine, taken_at=now, signal="kv_cache_usage", value=0.9),
            Observation(
                target=engine, taken_at=now, signal="kv_cache_usage", labels="engine=0", value=0.9
            ),
            Observation(
                target=logs,
                taken_at=hours_ago,
                signal="log_events",
                labels="kind=cuda_oom",
                value=1,
            ),
        ]
    )
    # Targets and observations (analysed artifacts' signals are observations too).
    with django_assert_max_num_queries(2):
        view = load_observations(deployment.id, signals_of(playbooks()["gpu-oom"]), now)
    kv = view[("engine", "kv_cache_usage")]
    assert len(kv) == 1  # the per-rank series is left out; the aggregate is kept
    # gpu-oom reads KV usage over an hour: the 20-hour-old value is not loaded...
    assert [v for _, v in kv[0][1]] == [0.9]
    # ...while OOM log events count over 48 hours.
    ((labels, points),) = view[("log", "log_events")]
    assert labels.endswith("kind=cuda_oom") and points[0][1] == 1
