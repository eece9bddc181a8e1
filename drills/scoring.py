"""How a trainee's decisions compare with the scenario's ground truth. Pure: no database.

Every node of the playbook tree is scored. A cause (leaf) is true when the simulator
injected it; a branch above causes is true when any cause below it is, since confirming
"the engine queue" is right when the queue's real cause is KV pressure. The trainee's
verdict on a node is the latest decision on it, as on the investigation page.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from investigations.choices import STATE_AFTER, DecisionAction, NodeState
from investigations.playbook import Hypothesis, Playbook

RIGHT_OUTCOMES = frozenset({"confirmed-true", "eliminated-false"})
WRONG_OUTCOMES = frozenset({"confirmed-false", "eliminated-true"})


@dataclass(frozen=True)
class DecisionRecord:
    node: str
    action: str  # confirm | eliminate | reopen
    sequence: int
    at: datetime
    by: str = ""  # username; empty for an automatic decision
    automatic: bool = False


@dataclass(frozen=True)
class BranchScore:
    key: str
    title: str
    depth: int
    is_cause: bool
    true: bool
    state: str  # confirmed | eliminated | open
    outcome: (
        str  # confirmed-true | eliminated-true | confirmed-false | eliminated-false | undecided
    )
    decided_by: str
    decided_at: datetime | None
    automatic: bool

    @property
    def indent(self) -> str:
        """Tree depth as text (the CSP admits no inline styles)."""
        return "\u2003" * self.depth + ("\u21b3 " if self.depth else "")

    @property
    def right(self) -> bool | None:
        """True right, False wrong, None undecided."""
        if self.outcome == "undecided":
            return None
        return self.outcome in RIGHT_OUTCOMES


@dataclass(frozen=True)
class DrillScore:
    branches: tuple[BranchScore, ...]
    right: int
    wrong: int
    undecided: int
    missed_causes: tuple[str, ...]  # true causes in the tree the trainee did not confirm
    outside_playbook: tuple[str, ...]  # true causes this symptom's tree cannot name
    first_correct_confirm_s: float | None  # start -> first confirm of a true cause

    @property
    def total(self) -> int:
        return len(self.branches)

    @property
    def score(self) -> float:
        """Share of the tree decided right (undecided nodes count as not right)."""
        return self.right / self.total if self.total else 0.0


def final_states(decisions: Iterable[DecisionRecord]) -> dict[str, DecisionRecord]:
    """Each decided node's latest decision (by sequence): the one that sets its state."""
    latest: dict[str, DecisionRecord] = {}
    for decision in sorted(decisions, key=lambda d: d.sequence):
        latest[decision.node] = decision
    return latest


def outcome(true: bool, state: str) -> str:
    if state == NodeState.OPEN:
        return "undecided"
    return f"{state}-{'true' if true else 'false'}"


def score(
    playbook: Playbook,
    decisions: Sequence[DecisionRecord],
    truth_causes: Collection[str],
    started_at: datetime,
) -> DrillScore:
    truth = set(truth_causes)
    latest = final_states(decisions)
    branches: list[BranchScore] = []

    def is_true(node: Hypothesis) -> bool:
        if node.is_cause:
            return node.key in truth
        return any(is_true(child) for child in node.children)

    def visit(node: Hypothesis, depth: int) -> None:
        last = latest.get(node.key)
        state = STATE_AFTER[last.action] if last else NodeState.OPEN
        decided = last if state != NodeState.OPEN else None
        true = is_true(node)
        branches.append(
            BranchScore(
                key=node.key,
                title=node.title,
                depth=depth,
                is_cause=node.is_cause,
                true=true,
                state=state,
                outcome=outcome(true, state),
                decided_by=decided.by if decided else "",
                decided_at=decided.at if decided else None,
                automatic=bool(decided and decided.automatic),
            )
        )
        for child in node.children:
            visit(child, depth + 1)

    for root in playbook.hypotheses:
        visit(root, 0)
    tree_causes = {b.key for b in branches if b.is_cause}
    first = next(
        (
            d
            for d in sorted(decisions, key=lambda d: d.sequence)
            if d.action == DecisionAction.CONFIRM and d.node in truth and d.node in tree_causes
        ),
        None,
    )
    return DrillScore(
        branches=tuple(branches),
        right=sum(1 for b in branches if b.right is True),
        wrong=sum(1 for b in branches if b.right is False),
        undecided=sum(1 for b in branches if b.right is None),
        missed_causes=tuple(
            b.key for b in branches if b.is_cause and b.true and b.state != NodeState.CONFIRMED
        ),
        outside_playbook=tuple(sorted(truth - tree_causes)),
        first_correct_confirm_s=(
            max(0.0, (first.at - started_at).total_seconds()) if first else None
        ),
    )
