"""Applying the fix the investigation suggests, through the simulator's control endpoint,
makes verification pass; recording it without applying it keeps verification failing.
Diagnose's engine over real HTTP, manual clock, every single scenario."""

from __future__ import annotations

import pytest

from deployments.budget import Budget
from enginesim import scenarios
from enginesim.config import FIX_FIELDS
from investigations.playbook import playbooks
from investigations.verification import verify
from tests.matrix.cases import CASES
from tests.matrix.run import START, open_diagnosis, post, simulator

pytestmark = pytest.mark.slow
POLL_S = 30
# Opened (at the case's open_at_s) with the alarm not firing: tp-straggler's one throttled
# rank stretches p99 ITL to ~99 ms at seed 0, under the 150 ms ceiling, fixed or not.
CLEAR_AT_FIX = frozenset({"tp-straggler"})


def _verify(name: str, apply_fix: bool):
    case = CASES[name]
    symptom = case.symptoms[0]
    playbook = playbooks()[symptom]
    budget = Budget(**case.budget)
    with simulator(name) as base:
        post(base, f"/control/advance?seconds={case.open_at_s}")
        diagnosis, clock = open_diagnosis(base, case, symptom, case.open_at_s, POLL_S)
        now = START.timestamp() + clock
        result = diagnosis.evaluate(now=now)
        root = result.find(result.ranking[0])
        template = playbook.node(root.key).fix
        changes = dict(root.fix.apply) or dict(scenarios.get(name).fix)
        applied_at = now
        if apply_fix:
            post(base, "/control/fix", {k: _engine_value(k, v) for k, v in changes.items()})
        end = applied_at + template.settle_s + template.verify_window_s + 2 * POLL_S
        while now < end:
            post(base, f"/control/advance?seconds={POLL_S}")
            now += POLL_S
            diagnosis.cycle(now=now)
        view = {
            key: [(labels, points) for labels, points in series.items()]
            for key, series in diagnosis.observations.items()
        }
        return root.key, verify(
            template, budget, view, applied_at=applied_at, now=now, params=root.fix.parameters,
            alarm=playbook.alarm,
        )  # fmt: skip


def _engine_value(key: str, value):
    """The playbook's apply values are numbers; the engine's settings have types."""
    kind = FIX_FIELDS.get(key, (type(value), False))[0]
    return kind(value) if kind in (bool, int, float) else value


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("apply_fix", [True, False], ids=["applied", "not-applied"])
def test_the_suggested_fix_verifies_only_when_applied(name, apply_fix):
    cause, result = _verify(name, apply_fix)
    assert cause in scenarios.get(name).causes
    detail = [(c.title, c.measured, c.op, c.threshold, c.holds) for c in result.criteria]
    expected = "passing" if apply_fix else "failing"
    if apply_fix and name in CLEAR_AT_FIX:
        # The alarm's own measurement was under its threshold when the fix went in: the
        # clean window after it is no evidence for the fix (verification.py).
        assert result.at_fix is not None and result.at_fix.holds is False, result.at_fix
        expected = "unattributable"
    assert result.state == expected, f"{name} ({cause}): {result.state}: {detail}"
