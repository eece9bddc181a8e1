"""Verifying a fix against the measurement that raised the alarm: a pure function.

The fix template's criteria (which include the alarm's own measurement) are evaluated
over observations taken *after* the fix took effect (its ``settle`` seconds after it was
applied): each over its trailing window, or, for ``over: since-fix``, over everything
since then, so a confirming signal that returns even once keeps the fix from passing
(load that merely dropped does not verify a fix that was never applied). Verification
passes only when every criterion holds and the verification window has elapsed; until then it is
pending, and a criterion with no data keeps it pending rather than passing it, until the
whole window has passed without that evidence: then it fails. A quantile read off a
histogram is known only to its bucket: a criterion whose threshold lies inside that bucket
is undecided (``held`` names the bucket), like a criterion without data.

A fix is credited only with a recovery it could have caused: when the alarm's own
measurement, over its own window up to the moment the fix was applied, was already under
the alarm's threshold, what would have passed is ``unattributable`` ("recovered before the
fix: not attributable"). The incident ended on its own (or something else ended it); the
fix may still be right, but this recovery is no evidence for it. Without data before the
fix nothing is claimed either way (absence is not evidence).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from deployments import budget as b
from investigations.choices import VerificationState
from investigations.evaluation import (
    Observations,
    bucket_decides,
    bucket_text,
    compare,
    expected_values,
    gather,
    threshold_of,
)
from investigations.playbook import Criterion, Fix

NOT_ATTRIBUTABLE = "recovered before the fix: not attributable"


@dataclass(frozen=True)
class CriterionResult:
    title: str
    measured: float | None
    threshold: float | None
    op: str
    holds: bool | None  # None: no data yet, or a quantile's bucket straddles the threshold
    guard: bool = False
    interval: tuple[float, float] | None = None  # a quantile's bucket (lower, upper]
    held: str = ""  # why a measured value decides nothing (the bucket it lies in)


@dataclass(frozen=True)
class VerificationResult:
    state: VerificationState  # pending | passing | failing | unattributable
    elapsed_s: float
    window_s: int
    criteria: tuple[CriterionResult, ...]
    # The alarm's measurement up to the fix, when the caller gave the alarm.
    at_fix: CriterionResult | None = None

    @property
    def recovered_before_fix(self) -> bool:
        """The alarm was already clear when the fix was applied (with data to say so)."""
        return self.at_fix is not None and self.at_fix.holds is False

    @property
    def note(self) -> str:
        return NOT_ATTRIBUTABLE if self.recovered_before_fix else ""

    @property
    def side_effects(self) -> tuple[CriterionResult, ...]:
        """Guards that fail: the fix works, but it costs something someone must act on."""
        return tuple(c for c in self.criteria if c.guard and c.holds is False)


def verify(
    fix: Fix,
    budget: b.Budget,
    observations: Observations,
    *,
    applied_at: float,
    now: float,
    params: Mapping[str, float] | None = None,
    alarm: Criterion | None = None,
) -> VerificationResult:
    """``alarm`` (the playbook's) lets a recovery that came before the fix be told apart
    from one the fix made; without it no such claim is made."""
    elapsed = max(0.0, now - applied_at)
    effective = applied_at + fix.settle_s
    after = {
        key: [(labels, [p for p in points if p[0] >= effective]) for labels, points in series]
        for key, series in observations.items()
    }
    scope = {
        **{f"budget.{n}": float(getattr(budget, n)) for n in b.Budget.__dataclass_fields__},
        **expected_values(budget, after, now),
        **{f"param.{k}": float(v) for k, v in (params or {}).items()},
    }
    results = []
    for criterion in fix.verify:
        # Only what happened since the fix took effect counts, however long the window.
        since = max(now - effective, 1)
        window = int(
            since if criterion.over == "since-fix" else min(criterion.measure.window_s, since)
        )
        evidence = gather(replace(criterion.measure, window_s=window), after, now)
        measured = evidence.value
        threshold, _ = threshold_of(criterion.when, scope)
        holds = (
            None
            if measured is None or threshold is None
            else compare(criterion.when.op, measured, threshold)
        )
        held = ""
        if holds is not None and threshold is not None and evidence.interval is not None:
            # A quantile is known only to its bucket: a threshold inside the bucket is
            # neither met nor missed, however the interpolation fell.
            holds = bucket_decides(criterion.when.op, evidence.interval, threshold)
            if holds is None:
                held = f"bucket {bucket_text(evidence.interval)} on both sides of {threshold:.4g}"
        results.append(
            CriterionResult(
                criterion.title,
                measured,
                threshold,
                criterion.when.op,
                holds,
                criterion.guard,
                interval=evidence.interval,
                held=held,
            )
        )
    gating = [r for r in results if not r.guard]
    window_over = elapsed >= fix.settle_s + fix.verify_window_s
    if any(r.holds is False for r in gating):
        state = VerificationState.FAILING
    elif elapsed >= fix.verify_window_s and all(r.holds for r in gating):
        state = VerificationState.PASSING
    elif window_over and any(r.holds is None for r in gating):
        # A whole window without the evidence a criterion needs (an engine that serves
        # nothing has no TTFT to measure) is not a verified fix.
        state = VerificationState.FAILING
    else:
        state = VerificationState.PENDING
    at_fix = alarm_at_fix(alarm, budget, observations, applied_at) if alarm else None
    if state == VerificationState.PASSING and at_fix is not None and at_fix.holds is False:
        state = VerificationState.UNATTRIBUTABLE
    return VerificationResult(state, elapsed, fix.verify_window_s, tuple(results), at_fix)


def alarm_at_fix(
    alarm: Criterion, budget: b.Budget, observations: Observations, applied_at: float
) -> CriterionResult:
    """The alarm over its own window up to ``applied_at``, from what was seen before it:
    ``holds`` True if it was firing, False if already clear, None without data."""
    before = {
        key: [(labels, [p for p in points if p[0] <= applied_at]) for labels, points in series]
        for key, series in observations.items()
    }
    scope = {
        **{f"budget.{n}": float(getattr(budget, n)) for n in b.Budget.__dataclass_fields__},
        **expected_values(budget, before, applied_at),
    }
    evidence = gather(alarm.measure, before, applied_at)
    measured = evidence.value
    threshold, _ = threshold_of(alarm.when, scope)
    holds = (
        None
        if measured is None or threshold is None
        else compare(alarm.when.op, measured, threshold)
    )
    held = ""
    if holds is not None and threshold is not None and evidence.interval is not None:
        # "Recovered before the fix" is a claim too: not on an interpolated guess.
        holds = bucket_decides(alarm.when.op, evidence.interval, threshold)
        if holds is None:
            held = f"bucket {bucket_text(evidence.interval)} on both sides of {threshold:.4g}"
    title = alarm.title or "The alarm when the fix was applied"
    return CriterionResult(title, measured, threshold, alarm.when.op, holds,
                           interval=evidence.interval, held=held)  # fmt: skip


def verification_signals(
    fix: Fix, *, applied_at: float, now: float, alarm: Criterion | None = None
) -> dict[str, int]:
    """Signal -> how far back verification must read it: a since-fix criterion needs
    everything since the fix, however short the measure's own window; the alarm (when
    given) its own window before the fix."""
    since = int(max(now - applied_at, 0)) + 1
    out: dict[str, int] = {}
    for criterion in fix.verify:
        window = since if criterion.over == "since-fix" else criterion.measure.window_s
        out[criterion.measure.signal] = max(window, out.get(criterion.measure.signal, 0))
    if alarm is not None:
        signal = alarm.measure.signal
        out[signal] = max(since + alarm.measure.window_s, out.get(signal, 0))
    return out
