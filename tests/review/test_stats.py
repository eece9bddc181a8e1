"""The statistics' definitions, on hand-built rows with hand-computed answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from review.stats import (
    ConfirmRow,
    InvestigationRow,
    VerifiedRow,
    format_duration,
    median,
    nearest_rank,
    team_statistics,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def inv(pk, *, root="", closed=60.0, drill=False, overridden=False, opened=0.0):
    return InvestigationRow(
        id=pk,
        opened_at=minutes(opened),
        closed_at=None if closed is None else minutes(closed),
        root_cause=root,
        is_drill=drill,
        overridden=overridden,
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
