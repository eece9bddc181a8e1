"""Rows kept between cycles (probes.window): the database still decides which earlier
polls a cycle's windowed statistics rest on."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from probes import tasks, window
from probes.models import Poll, Target, TargetKind

CYCLE = datetime(2026, 11, 30, 12, 1, 0, tzinfo=UTC)


def _snapshot(n: float) -> dict:
    return {
        "flavour": "vllm-v1",
        "gauges": {},
        "counters": {"prompt_tokens_total": 10.0 * n, "preemptions_total": n},
        "histograms": {
            "ttft": {"buckets": [["0.1", n], ["1.0", 2 * n], ["+Inf", 3 * n]], "count": 3 * n,
                     "sum": 1.5 * n},
            "itl": {"buckets": [["0.1", n], ["+Inf", n]], "count": None, "sum": None},
        },
    }  # fmt: skip


def test_a_row_gives_back_the_counters_and_histograms_it_was_made_from():
    snapshot = json.loads(json.dumps(_snapshot(2.0)))
    back = window.to_snapshot(window.to_row(snapshot))
    assert back == {"counters": snapshot["counters"], "histograms": snapshot["histograms"]}
    # Same shape, same layout object: a series across scrapes is one column.
    assert window.to_row(_snapshot(1.0)).layout is window.to_row(_snapshot(5.0)).layout
    assert not window.to_row(_snapshot(1.0)).layout.columnar  # itl has no count/sum


@pytest.mark.django_db
def test_history_uses_kept_rows_only_for_polls_the_database_has(deployment, monkeypatch):
    monkeypatch.setattr(tasks, "RECENT", window.Recent())
    target = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://127.0.0.1:9/metrics"
    )
    times = [CYCLE - timedelta(seconds=5 * k) for k in (3, 2, 1)]
    for n, at in enumerate(times):
        Poll.objects.create(target=target, cycle_at=at, ok=True, snapshot=_snapshot(n + 1.0))
    # Nothing kept: every snapshot is read from the database.
    first = tasks._history([target], CYCLE)[target.pk]
    assert [ts for ts, _ in first] == [at.timestamp() for at in times]
    assert [window.to_snapshot(r)["counters"]["preemptions_total"] for _, r in first] == [1, 2, 3]
    # A kept row whose poll is gone (pruned, or its transaction rolled back) is not used,
    # and one the database has but this process never kept is loaded.
    Poll.objects.filter(target=target, cycle_at=times[0]).delete()
    tasks.RECENT.forget([target.pk])
    tasks.RECENT.keep(target.pk, times[0].timestamp(), window.to_row(_snapshot(99.0)))
    again = tasks._history([target], CYCLE)[target.pk]
    assert [ts for ts, _ in again] == [at.timestamp() for at in times[1:]]
    assert [window.to_snapshot(r)["counters"]["preemptions_total"] for _, r in again] == [2, 3]


@pytest.mark.django_db
def test_only_windowed_kinds_read_history(deployment):
    dcgm = Target.objects.create(
        deployment=deployment, kind=TargetKind.DCGM, url="http://127.0.0.1:9/metrics"
    )
    Poll.objects.create(target=dcgm, cycle_at=CYCLE - timedelta(seconds=5), ok=True)
    assert tasks._history([dcgm], CYCLE) == {}


@pytest.mark.django_db
def test_a_process_that_kept_some_cycles_reads_only_the_others(deployment, monkeypatch):
    """With several worker processes each keeps some of a deployment's cycles."""
    monkeypatch.setattr(tasks, "RECENT", window.Recent())
    target = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://127.0.0.1:9/metrics"
    )
    times = [CYCLE - timedelta(seconds=5 * k) for k in (3, 2, 1)]
    for n, at in enumerate(times):
        Poll.objects.create(target=target, cycle_at=at, ok=True, snapshot=_snapshot(n + 1.0))
    tasks.RECENT.keep(target.pk, times[1].timestamp(), window.to_row(_snapshot(42.0)))
    rows = tasks._history([target], CYCLE)[target.pk]
    assert [window.to_snapshot(r)["counters"]["preemptions_total"] for _, r in rows] == [1, 42, 3]
