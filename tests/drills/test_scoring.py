"""The scorer on hand-built trees and decisions: every outcome, latest-wins, the summary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from drills.scoring import DecisionRecord, score
from investigations.playbook import Hypothesis, Playbook, playbooks

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def node(key: str, *children: Hypothesis) -> Hypothesis:
    return Hypothesis(key, key.title(), "why", 0.5, checks=(), children=children, fix=None)


# router-latency | engine-queue -> (kv-cache-pressure, kv-block-leak, queue-backlog)
TREE = Playbook(
    "high-ttft",
    1,
    "TTFT",
    "s",
    alarm=None,  # type: ignore[arg-type] - the scorer never reads the alarm
    hypotheses=(
        node("router-latency"),
        node(
            "engine-queue", node("kv-cache-pressure"), node("kv-block-leak"), node("queue-backlog")
        ),
    ),
)


def d(seq: int, key: str, action: str, minutes: float, by: str = "remi", auto: bool = False):
    return DecisionRecord(key, action, seq, T0 + timedelta(minutes=minutes), by, auto)


def by_key(result):
    return {b.key: b for b in result.branches}


def test_every_outcome_is_marked_against_the_truth():
    decisions = [
        d(1, "router-latency", "eliminate", 1),  # eliminated-false: right
        d(2, "engine-queue", "confirm", 2),  # true by its child: right
        d(3, "kv-block-leak", "confirm", 3, by="cora"),  # confirmed-false: wrong
        d(4, "kv-cache-pressure", "eliminate", 4),  # eliminated-true: wrong
        # queue-backlog undecided
    ]
    result = score(TREE, decisions, {"kv-cache-pressure"}, T0)
    b = by_key(result)
    assert [x.key for x in result.branches] == [
        "router-latency", "engine-queue", "kv-cache-pressure", "kv-block-leak", "queue-backlog",
    ]  # fmt: skip
    assert [x.depth for x in result.branches] == [0, 0, 1, 1, 1]
    assert b["router-latency"].outcome == "eliminated-false" and b["router-latency"].right
    assert b["engine-queue"].outcome == "confirmed-true" and b["engine-queue"].true
    assert b["kv-block-leak"].outcome == "confirmed-false" and b["kv-block-leak"].right is False
    assert b["kv-block-leak"].decided_by == "cora"
    assert b["kv-block-leak"].decided_at == T0 + timedelta(minutes=3)
    assert b["kv-cache-pressure"].outcome == "eliminated-true"
    assert b["kv-cache-pressure"].right is False
    assert b["queue-backlog"].outcome == "undecided" and b["queue-backlog"].right is None
    assert (result.right, result.wrong, result.undecided, result.total) == (2, 2, 1, 5)
    assert result.score == pytest.approx(0.4)
    assert result.missed_causes == ("kv-cache-pressure",)
    assert result.first_correct_confirm_s is None  # engine-queue is a branch, not a cause


def test_the_latest_decision_wins_and_timing_counts_the_first_true_cause_confirmed():
    decisions = [
        d(1, "kv-cache-pressure", "eliminate", 1),
        d(2, "kv-cache-pressure", "confirm", 7.5),
        d(3, "router-latency", "confirm", 8),
        d(4, "router-latency", "reopen", 9),  # back to open: undecided, nobody's verdict
        d(5, "kv-cache-pressure", "confirm", 10),  # a repeat does not move the first time
    ]
    result = score(TREE, decisions, ["kv-cache-pressure"], T0)
    b = by_key(result)
    assert b["kv-cache-pressure"].outcome == "confirmed-true"
    assert b["kv-cache-pressure"].decided_at == T0 + timedelta(minutes=10)
    assert b["router-latency"].outcome == "undecided"
    assert b["router-latency"].decided_by == "" and b["router-latency"].decided_at is None
    assert result.first_correct_confirm_s == pytest.approx(450.0)
    assert result.missed_causes == ()


def test_decisions_are_ordered_by_sequence_not_by_arrival():
    decisions = [d(2, "queue-backlog", "eliminate", 2), d(1, "queue-backlog", "confirm", 1)]
    assert by_key(score(TREE, decisions, set(), T0))["queue-backlog"].outcome == (
        "eliminated-false"
    )


def test_no_decisions_scores_zero_and_every_branch_undecided():
    result = score(TREE, [], {"kv-block-leak"}, T0)
    assert (result.right, result.wrong, result.undecided) == (0, 0, 5)
    assert result.score == 0.0
    assert result.missed_causes == ("kv-block-leak",)
    # A branch above a true cause is true; its siblings' branches are not.
    assert {b.key for b in result.branches if b.true} == {"engine-queue", "kv-block-leak"}


def test_true_causes_the_tree_cannot_name_are_reported_not_scored():
    decisions = [d(1, "router-latency", "eliminate", 1, auto=True, by="")]
    result = score(TREE, decisions, {"kv-cache-pressure", "gc-pauses"}, T0)
    assert result.outside_playbook == ("gc-pauses",)
    assert result.total == 5
    assert by_key(result)["router-latency"].automatic is True


def test_a_healthy_truth_makes_every_elimination_right_and_every_confirm_wrong():
    decisions = [d(1, "router-latency", "eliminate", 1), d(2, "engine-queue", "confirm", 2)]
    result = score(TREE, decisions, set(), T0)
    assert (result.right, result.wrong) == (1, 1)


def test_the_shipped_trees_score_in_tree_order():
    tree = playbooks()["high-ttft"]
    result = score(tree, [], {"kv-cache-pressure"}, T0)
    assert [b.key for b in result.branches] == [n.key for n in tree.walk()]
    assert result.branches[0].indent == ""
    assert next(b for b in result.branches if b.depth == 1).indent.endswith("\u21b3 ")
