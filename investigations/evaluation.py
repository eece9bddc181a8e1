"""Evaluating a playbook's tree against observations and the budget: pure functions.

Every poll cycle, each check's measurement is reduced over its window and compared
with its thresholds, giving confirm / eliminate / inconclusive with the numbers
behind it. Each hypothesis gets a score, prior x likelihood of its evidence (and
of its ancestors'), and the tree is ranked by it. Two rules are absolute:

* missing data is inconclusive, never "eliminated": a check without a value, or
  whose threshold needs a value nobody has observed, says so and counts for nothing;
* a suggestion is only a suggestion: people's decisions (confirm, eliminate,
  reopen) set a node's state, and evaluation never changes a decided node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deployments import budget as b
from investigations.expressions import FUNCTIONS, ExpressionError, Missing
from investigations.playbook import Check, Condition, Criterion, Fix, Hypothesis, Measure, Playbook
from probes.parsing.logevents import UNRECOGNISED

Point = tuple[float, float]
# (source, signal) -> [(labels text "k=v,k=v", points sorted by time)]
Observations = Mapping[tuple[str, str], Sequence[tuple[str, Sequence[Point]]]]

# How much one check moves a hypothesis: confirming evidence is strong, eliminating
# evidence decisive, inconclusive evidence neutral.
CONFIRM_LR = 4.0
ELIMINATE_LR = 0.05

# Engine signals a log's stats lines also give (probes.observe): read from the log only
# when no engine target reported the signal, so a log-only investigation has evidence.
LOG_STANDS_IN = frozenset(
    {
        "kv_cache_usage",
        "requests_running",
        "requests_waiting",
        "preemptions_rate",
        "prompt_tokens_rate",
        "generation_tokens_rate",
    }
)


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    measured: float | None
    outcome: str  # confirm | eliminate | inconclusive
    reason: str
    confirm_threshold: float | None = None
    eliminate_threshold: float | None = None
    window_s: int = 0


@dataclass(frozen=True)
class FixPlan:
    key: str
    title: str
    parameters: Mapping[str, float]
    apply: Mapping[str, float]
    command: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeResult:
    key: str
    title: str
    is_cause: bool
    state: str  # open | confirmed | eliminated (set by decisions only)
    suggestion: str  # confirm | eliminate | inconclusive
    score: float
    checks: tuple[CheckResult, ...]
    children: tuple[NodeResult, ...] = ()
    fix: FixPlan | None = None


@dataclass(frozen=True)
class AlarmResult:
    measured: float | None
    firing: bool | None  # None when there is no data
    threshold: float | None


@dataclass(frozen=True)
class Evaluation:
    alarm: AlarmResult
    nodes: tuple[NodeResult, ...]
    expected: Mapping[str, float | None]
    ranking: tuple[str, ...] = field(default=())  # cause keys, most likely first

    def find(self, key: str) -> NodeResult:
        stack = list(self.nodes)
        while stack:
            node = stack.pop()
            if node.key == key:
                return node
            stack.extend(node.children)
        raise KeyError(key)


def _labels(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def select(measure: Measure, observations: Observations, now: float) -> list[list[Point]]:
    """Points of the matching series inside the window ``(now - window, now]``.

    With no label filter, an unlabelled (aggregated) series is preferred when there is
    one: per-rank series of the same signal would otherwise be counted twice.
    """
    series = observations.get((measure.source, measure.signal), ())
    if not series and measure.source == "engine" and measure.signal in LOG_STANDS_IN:
        series = observations.get(("log", measure.signal), ())
    wanted = measure.labels.items()
    matching = [(labels, points) for labels, points in series if wanted <= _labels(labels).items()]
    if not measure.labels and any(labels == "" for labels, _ in matching):
        matching = [(labels, points) for labels, points in matching if labels == ""]
    if measure.where is not None:
        matching = _gated(measure, observations, matching)
    start = now - measure.window_s
    return [[p for p in points if start < p[0] <= now] for _, points in matching]


def _gated(measure: Measure, observations: Observations, matching: list) -> list:
    """Keep the points taken while the same series' ``where`` signal met its condition at
    the same time. A series with no such reading contributes nothing: an unknown load is
    not a loaded GPU, so clocks read then neither confirm nor eliminate throttling."""
    signal, op, value = measure.where  # type: ignore[misc]
    gates = {
        labels: dict(points) for labels, points in observations.get((measure.source, signal), ())
    }
    kept = []
    for labels, points in matching:
        gate = gates.get(labels)
        if gate:
            passed = [p for p in points if p[0] in gate and compare(op, gate[p[0]], value)]
            kept.append((labels, passed))
    return kept


def unrecognised_errors(measure: Measure, observations: Observations, now: float) -> float:
    """Log lines in the measure's window that looked like errors and matched no event.

    Only a count of log events can be held back by them: a zero count is evidence of
    absence only if every error the log showed was one the parser knows.
    """
    if measure.source != "log" or measure.signal != "log_events":
        return 0.0
    if measure.labels.get("kind") == UNRECOGNISED:
        return 0.0
    probe = Measure("log_events", "log", "sum", measure.window_s, {"kind": UNRECOGNISED})
    return _reduce(probe, observations, now) or 0.0


def reduce(measure: Measure, observations: Observations, now: float) -> float | None:
    """The measure's one number over its window, or None when nothing was observed.

    A zero count of log events beside unrecognised error lines is None, not zero: the
    line nobody could read may be the very event counted (an OOM in a new wording).
    """
    value = _reduce(measure, observations, now)
    if value is not None and value <= 0 and unrecognised_errors(measure, observations, now):
        return None
    return value


def _reduce(measure: Measure, observations: Observations, now: float) -> float | None:
    series = [points for points in select(measure, observations, now) if points]
    if not series:
        return None
    values = [v for points in series for _, v in points if math.isfinite(v)]
    if not values:
        return None
    match measure.reduce:
        case "last":
            latest = max(points[-1][0] for points in series)
            return max(points[-1][1] for points in series if points[-1][0] == latest)
        case "max":
            return max(values)
        case "min":
            return min(values)
        case "mean":
            return sum(values) / len(values)
        case "sum":
            return sum(values)
        case "increase":
            # Growth "over an hour" cannot be judged from a few seconds of it.
            covered = [p for p in series if p[-1][0] - p[0][0] >= measure.window_s / 4]
            if not covered:
                return None
            return max(points[-1][1] - points[0][1] for points in covered)
        case "spread":
            latest = max(points[-1][0] for points in series)
            now_values = [points[-1][1] for points in series if points[-1][0] == latest]
            if len(now_values) < 2 or min(now_values) <= 0:
                return None
            return max(now_values) / min(now_values) - 1
    raise ValueError(f"unknown reducer {measure.reduce}")


def _engine_value(observations: Observations, signal: str, now: float, window: int = 300):
    return reduce(Measure(signal, "engine", "mean", window), observations, now)


def expected_values(budget: b.Budget, observations: Observations, now: float) -> dict:
    """What the budget says measurements *should* be, given the traffic observed."""
    capacity = b.kv_capacity_tokens(budget)
    prompt_rate = _engine_value(observations, "prompt_tokens_rate", now)
    request_rate = _engine_value(observations, "e2e_count_rate", now)
    # vLLM V1 counts a request's prompt tokens when its first token comes out, as TTFT is
    # observed: per first token, not per finished request, or a backlog's burst of first
    # tokens (or a storm's burst of finishes) skews the average for minutes.
    first_token_rate = _engine_value(observations, "ttft_count_rate", now) or request_rate
    avg_prompt = prompt_rate / first_token_rate if prompt_rate and first_token_rate else None
    usage = reduce(Measure("kv_cache_usage", "engine", "last", 300), observations, now)
    running = reduce(Measure("requests_running", "engine", "last", 300), observations, now)
    avg_context = usage * capacity / running if usage is not None and running else None
    gen_rate = _engine_value(observations, "generation_tokens_rate", now)
    avg_output = gen_rate / request_rate if gen_rate is not None and request_rate else None
    # What the running requests can hold: prompt plus, on average, half their output.
    kv_of_running = (
        min(1.0, running * (avg_prompt + avg_output / 2) / capacity)
        if running is not None and avg_prompt and avg_output is not None
        else None
    )
    prefill_s = None
    if avg_prompt:
        steps = b.prefill_steps(budget, math.ceil(avg_prompt))
        prefill_s = steps * b.mixed_step_ceiling_ms(budget) / 1000
    # The budget's full SM clock; when it gives none (0), the GPU model's (the slowest
    # model seen, from dcgm-exporter's modelName or NVML's own maximum), else unknown.
    full_clock = budget.sm_clock_mhz if budget.sm_clock_mhz > 0 else None
    for source, signal in (("dcgm", "gpu_sm_clock_max_mhz"), ("nvml", "nvml_sm_clock_max_mhz")):
        if full_clock is None:
            full_clock = reduce(Measure(signal, source, "min", 300), observations, now)
    return {
        "expected.full_sm_clock_mhz": full_clock,
        "expected.kv_capacity_tokens": float(capacity),
        "expected.step_ceiling_s": b.mixed_step_ceiling_ms(budget) / 1000,
        "expected.chunk_cost_s": b.chunk_cost_ms(budget) / 1000,
        "expected.avg_prompt_tokens": avg_prompt,
        "expected.avg_context_tokens": avg_context,
        "expected.kv_usage_of_running": kv_of_running,
        "expected.prefill_s": prefill_s,
    }


def _scope(budget: b.Budget, expected: Mapping, observed: Mapping, baseline: Mapping) -> dict:
    scope: dict[str, float | None] = {
        f"budget.{name}": float(getattr(budget, name)) for name in b.Budget.__dataclass_fields__
    }
    scope.update(expected)
    scope.update({f"observed.{k.replace('-', '_')}": v for k, v in observed.items()})
    scope.update({f"baseline.{k}": v for k, v in baseline.items()})
    return scope


def playbook_functions(budget: b.Budget) -> dict:
    return {
        **FUNCTIONS,
        "seqs_for_occupancy": lambda avg, target: b.max_num_seqs_for_occupancy(budget, avg, target),
        "chunk_for_ceiling": lambda ceiling_ms: b.max_chunk_for_itl(budget, ceiling_ms),
    }


def threshold_of(condition: Condition | None, scope: Mapping) -> tuple[float | None, str]:
    if condition is None:
        return None, ""
    try:
        return condition.value.evaluate(scope), ""
    except Missing as exc:
        return None, str(exc)
    except ExpressionError as exc:
        return None, f"threshold not computable: {exc}"


def compare(op: str, measured: float, threshold: float) -> bool:
    return {
        "<": measured < threshold,
        "<=": measured <= threshold,
        ">": measured > threshold,
        ">=": measured >= threshold,
    }[op]


def evaluate_check(
    check: Check, measured: float | None, scope: Mapping, no_data: str = "no data in the window"
) -> CheckResult:
    confirm_at, confirm_missing = threshold_of(check.confirm, scope)
    eliminate_at, eliminate_missing = threshold_of(check.eliminate, scope)
    base: dict[str, Any] = {
        "id": check.id,
        "title": check.title,
        "measured": measured,
        "confirm_threshold": confirm_at,
        "eliminate_threshold": eliminate_at,
        "window_s": check.measure.window_s,
    }
    if measured is None:
        return CheckResult(**base, outcome="inconclusive", reason=no_data)
    if check.confirm and confirm_at is not None and compare(check.confirm.op, measured, confirm_at):
        reason = f"{measured:.4g} {check.confirm.op} {confirm_at:.4g}"
        return CheckResult(**base, outcome="confirm", reason=reason)
    if (
        check.eliminate
        and eliminate_at is not None
        and compare(check.eliminate.op, measured, eliminate_at)
    ):
        reason = f"{measured:.4g} {check.eliminate.op} {eliminate_at:.4g}"
        return CheckResult(**base, outcome="eliminate", reason=reason)
    missing = "; ".join(m for m in (confirm_missing, eliminate_missing) if m)
    reason = missing or f"{measured:.4g} is between the thresholds"
    return CheckResult(**base, outcome="inconclusive", reason=reason)


def _suggestion(results: Sequence[CheckResult], checks: Sequence[Check] = ()) -> str:
    optional = {c.id for c in checks if c.optional}
    vetoes = {c.id for c in checks if c.veto}
    if any(r.id in vetoes and r.outcome == "eliminate" for r in results):
        return "eliminate"
    # Optional checks and vetoes (which can only rule out) never hold a confirmation back.
    quiet = optional | vetoes
    outcomes = [r.outcome for r in results if not (r.id in quiet and r.outcome == "inconclusive")]
    if "eliminate" in outcomes and "confirm" not in outcomes:
        return "eliminate"
    if outcomes and all(o == "confirm" for o in outcomes):
        return "confirm"
    return "inconclusive"


def _likelihood(results: Sequence[CheckResult]) -> float:
    ratio = 1.0
    for result in results:
        if result.outcome == "confirm":
            ratio *= CONFIRM_LR
        elif result.outcome == "eliminate":
            ratio *= ELIMINATE_LR
    return ratio


def plan_fix(fix: Fix, budget: b.Budget, scope: Mapping) -> FixPlan:
    """Compute the fix's parameters; a parameter that cannot be computed is named."""
    functions = playbook_functions(budget)
    parameters: dict[str, float] = {}
    problems: list[str] = []
    for name, expression in fix.parameters.items():
        try:
            parameters[name] = expression.evaluate(scope, functions)
        except ExpressionError as exc:
            problems.append(f"{name}: {exc}")
    params_scope = {**scope, **{f"param.{k}": v for k, v in parameters.items()}}
    apply: dict[str, float] = {}
    for name, expression in fix.apply.items():
        try:
            apply[name] = expression.evaluate(params_scope, functions)
        except ExpressionError as exc:
            problems.append(f"{name}: {exc}")
    shown = {k: (int(v) if float(v).is_integer() else v) for k, v in parameters.items()}
    try:
        command = fix.command.format(**shown)
    except (KeyError, IndexError, ValueError):
        command = fix.command
    return FixPlan(fix.key, fix.title, parameters, apply, command, tuple(problems))


def evaluate(
    playbook: Playbook,
    budget: b.Budget,
    observations: Observations,
    now: float,
    *,
    decisions: Mapping[str, str] | None = None,
    baseline: Mapping[str, float | None] | None = None,
) -> Evaluation:
    """The whole tree at ``now``. ``decisions`` maps node key -> confirmed | eliminated."""
    decisions = decisions or {}
    expected = expected_values(budget, observations, now)
    observed = {}
    no_data: dict[str, str] = {}
    for node in playbook.walk():
        for check in node.checks:
            observed[check.id] = reduce(check.measure, observations, now)
            if observed[check.id] is None and (
                n := unrecognised_errors(check.measure, observations, now)
            ):
                no_data[check.id] = (
                    f"no count: {n:g} log lines looked like errors no known event matches"
                )
    scope = _scope(budget, expected, observed, baseline or {})
    alarm = evaluate_alarm(playbook.alarm, observations, now, scope)

    def visit(node: Hypothesis, inherited: float) -> NodeResult:
        results = tuple(
            evaluate_check(c, observed[c.id], scope, no_data.get(c.id, "no data in the window"))
            for c in node.checks
        )
        score = inherited * node.prior * _likelihood(results)
        state = decisions.get(node.key, "open")
        if state == "eliminated":
            score = 0.0
        children = tuple(visit(child, score) for child in node.children)
        suggestion = _suggestion(results, node.checks)
        fix = plan_fix(node.fix, budget, scope) if node.fix else None
        return NodeResult(
            node.key, node.title, node.is_cause, state, suggestion, score, results, children, fix
        )

    nodes = tuple(visit(node, 1.0) for node in playbook.hypotheses)
    causes: list[NodeResult] = []
    stack = list(nodes)
    while stack:
        result = stack.pop()
        if result.is_cause:
            causes.append(result)
        stack.extend(result.children)
    ranking = tuple(
        n.key for n in sorted(causes, key=lambda n: (n.state != "confirmed", -n.score, n.key))
    )
    return Evaluation(alarm, nodes, expected, ranking)


def evaluate_alarm(
    criterion: Criterion, observations: Observations, now: float, scope: Mapping
) -> AlarmResult:
    measured = reduce(criterion.measure, observations, now)
    threshold, _ = threshold_of(criterion.when, scope)
    if measured is None or threshold is None:
        return AlarmResult(measured, None, threshold)
    return AlarmResult(measured, compare(criterion.when.op, measured, threshold), threshold)
