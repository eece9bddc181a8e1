"""The probe-kind registry is the one place a kind is described, and it is complete."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from probes import kinds, vocabulary
from probes.kinds import KINDS, Fetch, Needs, Read, Runs, kind_of
from probes.models import HOST_KINDS, HTTP_KINDS, ON_DEMAND_KINDS, STORED_KINDS, TargetKind


def test_every_target_kind_has_an_entry_and_every_entry_a_target_kind():
    assert [k.value for k in KINDS] == list(TargetKind.values)
    assert {k.value: k.label for k in KINDS} == dict(TargetKind.choices)
    for choice in TargetKind:
        assert kind_of(choice).value == choice


@pytest.mark.django_db
def test_the_migrations_read_the_kinds_from_the_registry():
    """The migrations hold a reference to ``kinds.choices``, not a copy of the list, so the
    choices they give are always the registry's."""
    state = MigrationLoader(connection).project_state()
    field = state.models["probes", "target"].fields["kind"]
    assert [value for value, _ in field.choices] == [k.value for k in KINDS]


@pytest.mark.django_db
def test_a_new_kind_needs_no_migration(monkeypatch):
    """Issue 13: adding a probe kind is its registry entry, parser and tests; a choice list
    copied into a migration made every new kind a migration too."""
    import dataclasses

    from django.core.management import call_command

    extra = dataclasses.replace(KINDS[0], value="exporter", label="An exporter", option="x")
    monkeypatch.setattr(kinds, "KINDS", (*KINDS, extra))
    from probes.models import Target

    assert "exporter" in dict(Target._meta.get_field("kind").choices)
    call_command("makemigrations", "probes", "--check", "--dry-run", verbosity=0)


def test_the_model_tuples_are_the_registry_by_where_it_runs():
    # The kinds of today, each where it ran before the registry (a new kind adds to these).
    assert {"engine", "sglang_info", "prometheus", "dcgm", "log_http"} <= set(HTTP_KINDS)
    assert {"log_file", "nvml"} <= set(HOST_KINDS)
    assert "profiler" in ON_DEMAND_KINDS
    assert "artifacts" in STORED_KINDS
    assert sorted(HTTP_KINDS + HOST_KINDS + ON_DEMAND_KINDS + STORED_KINDS) == sorted(
        TargetKind.values
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
def test_each_entry_is_consistent(kind):
    # Polled kinds turn their reads into observations; on-demand ones are collected, and
    # stored ones are written by the console.
    assert (kind.observe is None) == (kind.runs in (Runs.ON_DEMAND, Runs.NOWHERE))
    # Where it runs decides what the form asks for and what the constraints demand.
    if kind.runs is Runs.NOWHERE:
        assert not kind.needs and kind.read_here is None and not kind.probed
    elif kind.runs is Runs.HOST:
        assert Needs.HOST_QUEUE in kind.needs and kind.read_here is not None
        assert Needs.URL not in kind.needs
    else:
        assert Needs.URL in kind.needs and kind.read_here is None
    assert (Needs.QUERIES in kind.needs) == (kind.fetch is Fetch.PROMQL)
    # Its observations land under a source playbooks may name.
    assert kind.source.name in vocabulary.SOURCES
    assert all(issubclass(error, ValueError) for error in kind.unusable)


def test_the_vocabulary_is_the_sources_of_the_kinds():
    assert set(vocabulary.SOURCES) >= {
        "engine",
        "sglang_info",
        "dcgm",
        "nvml",
        "prometheus",
        "log",
        "artifact",
    }
    assert kinds.values(source="log") == ("log_http", "log_file")
    assert vocabulary.signal_kind("engine", "ttft_p95") == "quantile"
    assert vocabulary.signal_kind("log", "preemptions_rate") == "rate"
    assert vocabulary.signal_kind("dcgm", "gpu_util_rate") == "gauge"
    assert vocabulary.signal_kind("artifact", "artifact_x") == "summary"
    assert vocabulary.companions("log", "preemptions_rate") == {}
    assert vocabulary.companions("engine", "ttft_mean") == {"count": "ttft_window_count"}
    assert vocabulary.aggregate_only("engine") and not vocabulary.aggregate_only("dcgm")
    assert not vocabulary.known_signal("nowhere", "x")


def test_diagnose_options_name_the_kinds_it_can_read():
    assert {"engine", "prometheus", "dcgm", "log"} <= set(kinds.options())
    assert kinds.by_option("log").value == "log_http"


def test_a_followed_stream_asks_for_its_next_piece():
    log = kind_of("log_http")
    assert log.url("http://h/logs", 42) == f"http://h/logs?offset=42&limit={kinds.LOG_READ_LIMIT}"
    assert log.url("http://h/logs?rank=0", 0).startswith("http://h/logs?rank=0&offset=0&")
    assert kind_of("engine").url("http://h/metrics", 42) == "http://h/metrics"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({"x-log-next-offset": "900"}, 900), ({}, 110)],
)
def test_the_next_offset_is_the_relays_or_the_bytes_counted(headers, expected):
    assert kind_of("log_http").next_offset(100, b"0123456789", headers) == expected


@pytest.mark.parametrize("header", ["soon", "-5", "99999999999999999999999", "\uff11\uff12"])
def test_a_relay_offset_that_is_not_one_is_the_targets_error(header):
    """Not silently counted: the poll fails as bad-offset and the stored offset stays."""
    from probes.logfile import LogOffsetError

    with pytest.raises(LogOffsetError):
        kind_of("log_http").next_offset(100, b"0123456789", {"x-log-next-offset": header})


def test_a_log_read_continues_the_previous_snapshots_follower():
    """The observer is pure: the state it continues from travels in the snapshot."""
    log = kind_of("log_http")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    first = log.observe(Read(b"INFO 01-01 00:00:00 partial", at=at, epoch=at.timestamp()))
    assert first.snapshot["follower"]["carry"] == "INFO 01-01 00:00:00 partial"
    again = log.observe(Read(b" line\n", at=at, epoch=at.timestamp(), previous=first.snapshot))
    assert again.snapshot["follower"]["carry"] == ""
    assert again.snapshot["follower"]["line_no"] == 1
