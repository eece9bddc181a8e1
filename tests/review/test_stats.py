"""The statistics' definitions, on hand-built rows with hand-computed answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from review import charts
from review.stats import (
    ActionRow,
    ConfirmRow,
    InvestigationRow,
    OnsetRow,
    VerifiedRow,
    format_duration,
    median,
    nearest_rank,
    team_statistics,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def inv(pk, *, root="", closed=60.0, drill=False, overridden=False, opened=0.0, severity=""):
    return InvestigationRow(
        id=pk,
        opened_at=minutes(opened),
        closed_at=None if closed is None else minutes(closed),
        root_cause=root,
        is_drill=drill,
        overridden=overridden,
        severity=severity,
    )


def test_median_and_nearest_rank_p90():
    assert median([]) is None and nearest_rank([], 90) is None
    assert median([5.0]) == 5.0 and nearest_rank([5.0], 90) == 5.0
    assert median([4, 1, 3]) == 3.0
    assert median([4, 1, 3, 10]) == 3.5  # mean of the two middle values
    ten = list(range(1, 11))  # ceil(0.9 * 10) = 9th value
    assert nearest_rank(ten, 90) == 9.0
    eleven = list(range(1, 12))  # ceil(0.9 * 11) = 10th value
    assert nearest_rank(eleven, 90) == 10.0
    assert nearest_rank([7, 3], 90) == 7.0  # ceil(1.8) = 2nd
    with pytest.raises(ValueError):
        nearest_rank([1], 0)


def test_the_definitions_on_a_hand_built_team():
    rows = [
        # a: root cause confirmed at 10 min (an earlier confirm of another node is ignored,
        # a later re-confirm of the same node too); verified fix, closed at 40 min.
        inv("a", root="gc-pauses", closed=40),
        # b: root cause confirmed at 30 min; closed with an override: no MTTR.
        inv("b", root="kv-cache-pressure", closed=90, overridden=True),
        # c: root cause but no confirm decision on it: counted by cause, not timed.
        inv("c", root="gc-pauses", closed=120),
        # d: closed without a fix (no root cause), verified: MTTR 20 min.
        inv("d", closed=20),
        # e: a drill, excluded from everything (its 1-minute times would drag medians).
        inv("e", root="gc-pauses", closed=2, drill=True),
        # f: still open.
        inv("f", closed=None),
        # g: opened at 100, confirmed at 160 (60 min), closed at 200 (100 min).
        inv("g", root="tp-straggler", opened=100, closed=200),
    ]
    confirms = [
        ConfirmRow("a", "engine-queue", minutes(5)),
        ConfirmRow("a", "gc-pauses", minutes(25)),
        ConfirmRow("a", "gc-pauses", minutes(10)),
        ConfirmRow("b", "kv-cache-pressure", minutes(30)),
        ConfirmRow("c", "tp-straggler", minutes(3)),
        ConfirmRow("e", "gc-pauses", minutes(1)),
        ConfirmRow("g", "tp-straggler", minutes(160)),
    ]
    stats = team_statistics(rows, confirms)
    assert stats.drills_excluded == 1
    assert stats.still_open == 1
    assert stats.closed == 5
    # Most frequent first; ties by name, "none recorded" ("") last among equals.
    assert stats.by_root_cause == [
        ("gc-pauses", 2),
        ("kv-cache-pressure", 1),
        ("tp-straggler", 1),
        ("", 1),
    ]
    # Time to root cause: a 10, b 30, g 60 minutes -> median 30, p90 = 3rd of 3 = 60.
    assert stats.time_to_root_cause.count == 3
    assert stats.time_to_root_cause.median_s == 30 * 60
    assert stats.time_to_root_cause.p90_s == 60 * 60
    assert stats.without_confirm == 1
    # Verified fix: a 40, c 120, d 20, g 100 minutes -> median (40+100)/2 = 70, p90 = 4th = 120.
    assert stats.time_to_verified_fix.count == 4
    assert stats.time_to_verified_fix.median_s == 70 * 60
    assert stats.time_to_verified_fix.p90_s == 120 * 60
    assert stats.closed_with_override == 1


def test_verified_fix_time_is_the_last_pass_before_the_close():
    rows = [
        # h: passed at 30, failed, passed again at 50, closed at 80: verified at 50.
        inv("h", root="gc-pauses", closed=80),
        # i: its only passing event comes after the close (a later cycle): close time, 70.
        inv("i", root="gc-pauses", closed=70),
        # j: closed with an override: never timed, whatever its events say.
        inv("j", root="gc-pauses", closed=10, overridden=True),
    ]
    verified = [
        VerifiedRow("h", minutes(30)),
        VerifiedRow("h", minutes(50)),
        VerifiedRow("i", minutes(75)),
        VerifiedRow("j", minutes(5)),
    ]
    stats = team_statistics(rows, [], verified)
    # h 50 and i 70 minutes -> median 60, p90 = 2nd of 2 = 70.
    assert stats.time_to_verified_fix.count == 2
    assert stats.time_to_verified_fix.median_s == 60 * 60
    assert stats.time_to_verified_fix.p90_s == 70 * 60
    assert stats.verified_at_close == 1


def test_no_rows_give_no_numbers():
    stats = team_statistics([], [])
    assert stats.closed == stats.still_open == stats.drills_excluded == 0
    assert stats.by_root_cause == []
    assert stats.time_to_root_cause.median_s is None
    assert stats.time_to_verified_fix.p90_s is None


def test_only_drills_give_no_numbers_but_say_so():
    stats = team_statistics([inv("x", root="gc-pauses", drill=True)], [])
    assert stats.drills_excluded == 1 and stats.closed == 0
    assert stats.time_to_verified_fix.count == 0


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "—"),
        (0, "0 s"),
        (12.4, "12 s"),
        (250, "4 min 10 s"),
        (3900, "1 h 05 min"),
        (2 * 86_400 + 3 * 3600 + 59, "2 d 3 h"),
    ],
)
def test_durations_read_like_people_write_them(seconds, shown):
    assert format_duration(seconds) == shown


def test_time_to_acknowledge_from_the_alarms_onset_to_the_first_persons_action():
    rows = [
        # a: the alarm fired at 0, an alert opened it at 2, a person decided at 5: 5 min.
        inv("a", opened=2, closed=60, severity="sev2"),
        # b: a person opened it at 10, before any alarm (which fired at 12): 0 min.
        inv("b", opened=10, closed=60, severity="sev2"),
        # c: no alarm event; opened at 20 by automation, first person at 32: 12 min.
        inv("c", opened=20, closed=60, severity="sev1"),
        # d: automation only: never acknowledged.
        inv("d", opened=30, closed=60),
        # e: a drill, f: still open: neither counts.
        inv("e", opened=0, closed=1, drill=True, severity="sev1"),
        inv("f", opened=0, closed=None, severity="sev1"),
    ]
    onsets = [
        OnsetRow("a", minutes(0)),
        OnsetRow("a", minutes(1)),  # a later firing: the earliest counts
        OnsetRow("b", minutes(12)),
        OnsetRow("e", minutes(0)),
    ]
    first_actions = [
        ActionRow("a", minutes(7)),
        ActionRow("a", minutes(5)),
        ActionRow("b", minutes(10)),
        ActionRow("c", minutes(32)),
        ActionRow("e", minutes(0.5)),
    ]
    stats = team_statistics(rows, [], [], onsets, first_actions)
    assert stats.time_to_acknowledge.count == 3
    assert stats.time_to_acknowledge.median_s == 5 * 60  # of 0, 5, 12 minutes
    assert stats.time_to_acknowledge.p90_s == 12 * 60
    assert stats.never_acknowledged == 1
    # Worst first, "not set" last; the drill's and the open one's SEV1 are not counted.
    assert stats.by_severity == [("sev1", 1), ("sev2", 2), ("", 1)]


def test_weekly_trends_group_by_the_week_opened_and_keep_empty_weeks():
    monday = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday

    def at(days: float, hours: float = 0) -> float:
        return ((monday - T0).total_seconds() / 60) + days * 1440 + hours * 60

    rows = [
        inv("a", opened=at(0), closed=at(0, 1), severity="sev1", root="gc-pauses"),
        inv("b", opened=at(6, 23), closed=at(7, 1), severity="sev3", root="gc-pauses"),
        # Two weeks later (the week between is empty).
        inv("c", opened=at(14, 2), closed=at(14, 3), severity="sev3"),
        inv("d", opened=at(7), closed=at(7, 1), drill=True, severity="sev1"),
    ]
    confirms = [ConfirmRow("a", "gc-pauses", minutes(at(0, 0.5)))]
    stats = team_statistics(rows, confirms)
    weeks = stats.weeks
    assert [w.start.isoformat() for w in weeks] == ["2026-03-02", "2026-03-09", "2026-03-16"]
    assert [w.count for w in weeks] == [2, 0, 1]  # b opened on Sunday: the first week
    assert weeks[0].by_severity == {"sev1": 1, "sev3": 1}
    assert weeks[0].by_root_cause == {"gc-pauses": 2}
    assert weeks[0].median_root_cause_s == 30 * 60
    assert weeks[0].median_verified_fix_s == 90 * 60  # 60 and 120 minutes
    assert weeks[1].median_verified_fix_s is None  # nothing to measure: no point
    assert weeks[2].by_root_cause == {"": 1}

    severity = charts.by_severity(weeks, lambda s: s.upper() or "not set")
    assert [t["name"] for t in severity["data"]] == ["SEV1", "SEV3"]
    assert severity["data"][1]["y"] == [1, 0, 1] and severity["layout"]["barmode"] == "stack"
    assert severity["data"][0]["x"] == ["2026-03-02", "2026-03-09", "2026-03-16"]
    cause = charts.by_root_cause(weeks)
    assert [t["name"] for t in cause["data"]] == ["gc-pauses", "none recorded"]
    lines = charts.durations(weeks)
    assert [t["name"] for t in lines["data"]] == [
        "Time to acknowledge",
        "Time to root cause",
        "Time to verified fix",
    ]
    assert lines["data"][2]["y"] == [90.0, None, 60.0]
