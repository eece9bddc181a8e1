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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from deployments import budget as b
from investigations.choices import NodeState, Suggestion
from investigations.expressions import FUNCTIONS, ExpressionError, Missing
from investigations.playbook import Check, Condition, Criterion, Fix, Hypothesis, Measure, Playbook
from probes.engine_promql import STANDS_IN
from probes.parsing.logevents import UNRECOGNISED
from probes.vocabulary import UNKNOWN_MARKS, companions, signal_kind

# The vocabulary (``investigations.choices``) bound once: an Enum attribute lookup costs
# about 1 µs on Python 3.11, ten times a module global, and the walk compares outcomes
# for every check of every node on every cycle.
CONFIRM, ELIMINATE, INCONCLUSIVE = Suggestion.CONFIRM, Suggestion.ELIMINATE, Suggestion.INCONCLUSIVE
OPEN, CONFIRMED, ELIMINATED = NodeState.OPEN, NodeState.CONFIRMED, NodeState.ELIMINATED

Point = tuple[float, float]
# (source, signal) -> [(labels text "k=v,k=v", points sorted by time)]
Observations = Mapping[tuple[str, str], Sequence[tuple[str, Sequence[Point]]]]

# How much one check moves a hypothesis: confirming evidence is strong, eliminating
# evidence decisive, inconclusive evidence neutral.
CONFIRM_LR = 4.0
ELIMINATE_LR = 0.05

# How much data a value needs before it is evidence (module docstring of each below).
# Rare events: at a true rate r, a span of s seconds shows none with probability e^(-r s);
# "none seen" says the rate is below r only once about three were expected (5 %).
EXPECTED_EVENTS = 3.0
# A hold-only veto short of clearing: its cause's own evidence is muddied (CheckResult.held).
MUDDIED = "muddied"
# The smallest rate of events that matters, where a check names none (``min_rate``): one a
# minute. "No preemption" therefore takes three minutes of scrapes to mean anything.
DEFAULT_MIN_RATE = 1 / 60
# A histogram window's mean of fewer observations than this is an anecdote about a
# request or two, not the mean (its standard error is still half the spread).
MIN_MEAN_OBSERVATIONS = 5
# Samples a gauge's reduction needs before it stands for its window. "The max stayed
# below" and "the min stayed above" claim every sample in the window, a mean averages
# them: one sample is only the last value. "The max went above" takes the one sample.
_BOUNDED_BY_ONE = {"max": (">", ">="), "min": ("<", "<=")}
_SAMPLES = {"last": 1, "sum": 1, "spread": 1, "increase": 2, "mean": 2, "max": 2, "min": 2}
# "Stayed below" and "stayed above" are claims about the whole window, and the samples
# speak only for the seconds between the first and the last: a KV usage that read 0.64
# and 0.70 five seconds apart says nothing of where it is a minute later (it was filling
# the cache). Such a claim, and growth over a window (``increase``), needs data over at
# least this fraction of the window; before that it "needs ≥ N s more data".
WINDOW_COVERAGE = 0.25
_WINDOW_CLAIMS = {"max": ("<", "<="), "min": (">", ">=")}
# A trace's per-step reductions and the signal that counts the steps behind them: its
# maximum "stayed below" sees a cause in a share ``rarest`` of the steps only once that
# share would have put about EXPECTED_EVENTS steps in the trace (0.01: 300 steps; a
# 200-step trace expects two).
STEP_COUNTED = {
    ("artifact", signal): "artifact_step_count"
    for signal in (
        "artifact_prefill_step_excess_ms",
        "artifact_max_new_tokens_per_step",
        "artifact_step_max_ms",
        "artifact_step_p99_ms",
    )
}
_QUANTILE = re.compile(r"_p(\d+)$")

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


# Engine signals a Prometheus scraping the engine answers under the same name
# (probes.engine_promql): read when neither an engine target nor a log reported them.
PROMETHEUS_STANDS_IN = frozenset(STANDS_IN)


@dataclass(frozen=True)
class Evidence:
    """A measure's value with what it rests on: the samples in its window (first and
    last time, how many), the seconds of data behind it (for a rate, the scrapes its
    first value already covered), the bucket a quantile lies in and the observations
    behind a histogram's mean."""

    value: float | None
    kind: str = "gauge"  # gauge | rate | quantile | mean | summary (vocabulary.signal_kind)
    first_at: float | None = None
    last_at: float | None = None
    samples: int = 0
    span_s: float = 0.0
    interval: tuple[float, float] | None = None
    count: float | None = None
    withheld: str = ""  # why the window's values were not evidence, when none were


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    measured: float | None
    outcome: Suggestion
    reason: str
    confirm_threshold: float | None = None
    eliminate_threshold: float | None = None
    window_s: int = 0
    # The data behind the value (Evidence), beside its window.
    first_at: float | None = None
    last_at: float | None = None
    samples: int = 0
    span_s: float = 0.0
    interval: tuple[float, float] | None = None  # a quantile's bucket (lower, upper]
    count: float | None = None  # observations behind a histogram's mean
    # Why a value that crossed a threshold is not yet evidence: span | samples | bucket |
    # observations; ``needs_s``: the seconds of data still missing (a short span).
    held: str = ""
    needs_s: float | None = None
    # A veto's clearing threshold (Check.clears) and whether its value fell short of it
    # without ruling the cause out: a veto in doubt holds a confirmation back.
    clears_threshold: float | None = None
    in_doubt: bool = False

    @property
    def bucket(self) -> str:
        """The quantile's bucket as text ("512 to 1024", "above 8192"), or ""."""
        return bucket_text(self.interval) if self.interval is not None else ""

    @property
    def needs_more(self) -> str:
        """What it waits for, as the page and ``diagnose`` say it, or ""."""
        if not self.held:
            return ""
        if self.needs_s is not None:
            return f"needs ≥ {math.ceil(self.needs_s)} s more data"
        return {
            "bucket": "needs a finer bucket or a clearer value",
            "samples": "needs more samples",
            "observations": "needs more observations",
            "rare": "needs evidence that sees rare steps (a deeper quantile, a longer trace)",
            MUDDIED: "needs this to clear: until then it muddies the cause's evidence",
        }.get(self.held, "needs more data")


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
    state: str  # a NodeState: open | confirmed | eliminated (set by decisions only)
    suggestion: Suggestion
    score: float
    checks: tuple[CheckResult, ...]
    children: tuple[NodeResult, ...] = ()
    fix: FixPlan | None = None
    # Why the suggestion is not the node's own checks' (a parent following its children).
    note: str = ""

    @property
    def evidence_count(self) -> int:
        """Checks with a value in their window (0: the node has no data at all)."""
        return sum(1 for c in self.checks if c.measured is not None)

    @property
    def supported(self) -> bool:
        """Its own checks weigh for it on balance (some confirm, and what they confirm
        outweighs what the others rule out), and it is not ruled out. A confirming check
        beside an eliminating one (a long queue wait with a queue in its normal range: the
        wait was prefill's) is evidence against on balance, no support above a cause
        without data."""
        return (
            self.suggestion != ELIMINATE
            and not any(c.held == MUDDIED for c in self.checks)
            and any(c.outcome == CONFIRM for c in self.checks)
            and _likelihood(self.checks) > 1.0
        )


@dataclass(frozen=True)
class AlarmResult:
    measured: float | None
    firing: bool | None  # None when there is no data
    threshold: float | None


@dataclass(frozen=True)
class Share:
    """A confirmed cause's part of the alarm: what its ``explains`` arithmetic accounts for
    (in the alarm's unit), its share of what all confirmed causes account for, and of the
    alarm's excess over its threshold (None without a firing alarm)."""

    key: str
    explains: float
    share: float
    of_excess: float | None


@dataclass(frozen=True)
class Evaluation:
    alarm: AlarmResult
    nodes: tuple[NodeResult, ...]
    expected: Mapping[str, float | None]
    ranking: tuple[str, ...] = field(default=())  # cause keys, most likely first
    # Confirmed causes' shares of the alarm (largest first), when two or more are confirmed.
    shares: tuple[Share, ...] = field(default=())

    def find(self, key: str) -> NodeResult:
        stack = list(self.nodes)
        while stack:
            node = stack.pop()
            if node.key == key:
                return node
            stack.extend(node.children)
        raise KeyError(key)

    def causes(self) -> dict[str, NodeResult]:
        """Every cause in the tree by key: what scoring against a ground truth reads."""
        found: dict[str, NodeResult] = {}
        stack = list(self.nodes)
        while stack:
            node = stack.pop()
            stack.extend(node.children)
            if node.is_cause:
                found[node.key] = node
        return found

    def leading_path(self) -> tuple[str, ...]:
        """The keys from a root down to the most likely cause (what the page expands)."""
        if not self.ranking:
            return ()

        def walk(nodes: Sequence[NodeResult], path: tuple[str, ...]) -> tuple[str, ...]:
            for node in nodes:
                if node.key == self.ranking[0]:
                    return (*path, node.key)
                if found := walk(node.children, (*path, node.key)):
                    return found
            return ()

        return walk(self.nodes, ())


def _labels(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def select(measure: Measure, observations: Observations, now: float) -> list[list[Point]]:
    """Points of the matching series inside the window ``(now - window, now]``.

    With no label filter, an unlabelled (aggregated) series is preferred when there is
    one: per-rank series of the same signal would otherwise be counted twice.
    """
    return [points for _, points in _select_labelled(measure, observations, now)]


def _select_labelled(
    measure: Measure, observations: Observations, now: float
) -> list[tuple[str, list[Point]]]:
    series = observations.get((measure.source, measure.signal), ())
    if not series and measure.source == "engine" and measure.signal in LOG_STANDS_IN:
        series = observations.get(("log", measure.signal), ())
    if not series and measure.source == "engine" and measure.signal in PROMETHEUS_STANDS_IN:
        series = observations.get(("prometheus", measure.signal), ())
    wanted = measure.labels.items()
    matching = [(labels, points) for labels, points in series if wanted <= _labels(labels).items()]
    if not measure.labels and any(labels == "" for labels, _ in matching):
        matching = [(labels, points) for labels, points in matching if labels == ""]
    if measure.where is not None:
        matching = _gated(measure, observations, matching)
    start = now - measure.window_s
    return [(labels, [p for p in points if start < p[0] <= now]) for labels, points in matching]


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
    return _reduce_series(measure, select(measure, observations, now))


def _reduce_series(measure: Measure, selected: Sequence[Sequence[Point]]) -> float | None:
    series = [points for points in selected if points]
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
            covered = [
                p for p in series if p[-1][0] - p[0][0] >= measure.window_s * WINDOW_COVERAGE
            ]
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


def _companion(
    observations: Observations, source: str, signal: str, labels: str
) -> dict[float, float] | None:
    for other, points in observations.get((source, signal), ()):
        if other == labels:
            return dict(points)
    return None


def gather(measure: Measure, observations: Observations, now: float) -> Evidence:
    """The measure's value (as ``reduce``) with what it rests on (``Evidence``).

    A histogram's mean resting on fewer than ``MIN_MEAN_OBSERVATIONS`` observations is
    left out of the reduction; a quantile carries the bucket it was interpolated in,
    reduced like the value (the max of quantiles lies between the largest lower bounds
    and the largest upper bounds); a rate's span starts where the scrapes behind its
    first value in the window started. Sources that record none of this (an older probe,
    a Prometheus answer) give the value alone.
    """
    kind = signal_kind(measure.source, measure.signal)
    roles = companions(measure.source, measure.signal)
    labelled = [(lab, pts) for lab, pts in _select_labelled(measure, observations, now) if pts]
    withheld = ""
    counts: list[float] = []
    if kind == "mean" and "count" in roles:
        kept = []
        for labels, points in labelled:
            counted = _companion(observations, measure.source, roles["count"], labels)
            if counted is None:
                kept.append((labels, points))
                continue
            enough = [p for p in points if counted.get(p[0], 0.0) >= MIN_MEAN_OBSERVATIONS]
            counts += [counted[p[0]] for p in enough]
            if len(enough) < len(points):
                most = max(counted.get(p[0], 0.0) for p in points)
                withheld = (
                    f"needs ≥ {MIN_MEAN_OBSERVATIONS} observations per mean "
                    f"(the window's rest on at most {most:g})"
                )
            kept.append((labels, enough))
        labelled = [(lab, pts) for lab, pts in kept if pts]
    value = _reduce_series(measure, [points for _, points in labelled])
    if value is not None and value <= 0 and unrecognised_errors(measure, observations, now):
        value = None
    if not labelled:
        return Evidence(None, kind, withheld=withheld)
    if value is not None and UNKNOWN_MARKS.get((measure.source, measure.signal)) == value:
        return Evidence(None, kind, withheld="not known since the engine last started")
    spans = [
        _span(kind, measure, observations, labels, points, roles) for labels, points in labelled
    ]
    interval = _interval(measure, observations, labelled, roles) if kind == "quantile" else None
    return Evidence(
        value,
        kind,
        first_at=min(points[0][0] for _, points in labelled),
        last_at=max(points[-1][0] for _, points in labelled),
        samples=max(len(points) for _, points in labelled),
        span_s=max(spans),
        interval=interval,
        count=min(counts) if counts else None,
    )


def _span(
    kind: str,
    measure: Measure,
    observations: Observations,
    labels: str,
    points: Sequence[Point],
    roles: Mapping[str, str],
) -> float:
    """Seconds of data behind one series' values in the window. A gauge's are its own
    samples; a rate's first value already covered the scrapes before it (``span``
    companion), or, where none is recorded, at least one sampling interval."""
    first, last = points[0][0], points[-1][0]
    if kind in ("gauge", "summary"):
        return last - first
    covered = 0.0
    spans = (
        _companion(observations, measure.source, roles["span"], labels) if "span" in roles else None
    )
    if spans is not None and first in spans:
        covered = spans[first]
    elif len(points) >= 2:
        covered = points[1][0] - points[0][0]
    return min(float(measure.window_s), last - first + covered)


def _interval(
    measure: Measure,
    observations: Observations,
    labelled: Sequence[tuple[str, Sequence[Point]]],
    roles: Mapping[str, str],
) -> tuple[float, float] | None:
    """The reduced value's bucket, from each point's (an absent bound is unbounded: a
    rank in the +Inf bucket has no upper bound to record)."""
    bounds: list[tuple[float, float, float, float]] = []  # (t, value, lo, hi)
    for labels, points in labelled:
        lo = _companion(observations, measure.source, roles["lo"], labels)
        hi = _companion(observations, measure.source, roles["hi"], labels)
        for t, v in points:
            if lo is None and hi is None:
                bounds.append((t, v, v, v))
            else:
                bounds.append((t, v, (lo or {}).get(t, -math.inf), (hi or {}).get(t, math.inf)))
    if not bounds or all(b[2] == b[1] == b[3] for b in bounds):
        return None
    match measure.reduce:
        case "max":
            return max(b[2] for b in bounds), max(b[3] for b in bounds)
        case "min":
            return min(b[2] for b in bounds), min(b[3] for b in bounds)
        case "mean":
            return (
                sum(b[2] for b in bounds) / len(bounds),
                sum(b[3] for b in bounds) / len(bounds),
            )
        case "last":
            latest = max(b[0] for b in bounds)
            now_bounds = [b for b in bounds if b[0] == latest]
            return max(b[2] for b in now_bounds), max(b[3] for b in now_bounds)
    return None


def _engine_value(observations: Observations, signal: str, now: float, window: int = 300):
    return reduce(Measure(signal, "engine", "mean", window), observations, now)


def _anecdote(observations: Observations, counted: str, now: float) -> bool:
    """The latest window counted fewer requests than a mean needs (a source that counts
    none, an older probe or a Prometheus answer, leaves its own average standing)."""
    count = reduce(Measure(counted, "engine", "last", 300), observations, now)
    return count is not None and count < MIN_MEAN_OBSERVATIONS


def _preempting(observations: Observations, now: float) -> bool:
    """Preemptions showed in the last window (a storm: the steady state is gone)."""
    rate = reduce(Measure("preemptions_rate", "engine", "max", 300), observations, now)
    return rate is not None and rate > 0


def _lifetime(observations: Observations, signal: str, now: float) -> float | None:
    """The latest of an engine's since-start averages (a positive one), or None."""
    value = reduce(Measure(signal, "engine", "last", 300), observations, now)
    return value if value is not None and value > 0 else None


# Where an engine reports its own KV layout (vLLM's ``cache_config_info``, SGLang's
# ``max_total_num_tokens`` gauge or its /server_info token capacity), most direct first,
# and how far back a report still stands for the running engine.
CAPACITY_SIGNALS = (("engine", "kv_capacity_tokens"), ("sglang_info", "sglang_token_capacity"))
CAPACITY_WINDOW_S = 300
FROM_ENGINE = "from the engine"
FROM_BUDGET = "from the budget constants"


@dataclass(frozen=True)
class KvCapacity:
    """The KV capacity evaluation divides by, and the block size requests are held in."""

    tokens: float
    block_size: float | None
    from_engine: bool

    @property
    def source(self) -> str:
        return FROM_ENGINE if self.from_engine else FROM_BUDGET


def _latest_each(
    observations: Observations, source: str, signal: str, now: float, window: float
) -> list[float]:
    """The latest positive value of each series (each engine, each rank) in the window."""
    start = now - window
    latest = []
    for _, points in observations.get((source, signal), ()):
        inside = [v for t, v in points if start < t <= now and math.isfinite(v) and v > 0]
        if inside:
            latest.append(inside[-1])
    return latest


def kv_capacity(budget: b.Budget, observations: Observations, now: float) -> KvCapacity:
    """The engine's own KV capacity where it reports one, else the budget's arithmetic.

    The engine knows what it allocated (after profiling, overrides, the CPU backend's
    fixed space); the budget's "KV GiB / bytes per token" is what someone wrote down. Of
    several engines the smallest capacity is taken: KV usage is read as the fullest
    engine's, and a smaller pool fills first. The block size (vLLM's ``block_size``) is
    the granularity requests hold KV in; unknown (SGLang, older vLLM) means per token.
    """
    block_sizes = _latest_each(observations, "engine", "kv_block_size", now, CAPACITY_WINDOW_S)
    block = max(block_sizes) if block_sizes else None
    for source, signal in CAPACITY_SIGNALS:
        reported = _latest_each(observations, source, signal, now, CAPACITY_WINDOW_S)
        if reported:
            return KvCapacity(min(reported), block, True)
    return KvCapacity(float(b.kv_capacity_tokens(budget)), block, False)


def held_tokens(tokens: float, block_size: float | None) -> float:
    """KV tokens a request of ``tokens`` holds: whole blocks, ceil(tokens / block size).

    On an average request this is a floor on the rounding (a spread of lengths wastes
    about half a block each), which keeps an "unexplained usage" check conservative."""
    if not block_size or block_size <= 1:
        return tokens
    return math.ceil(tokens / block_size) * block_size


def expected_values(budget: b.Budget, observations: Observations, now: float) -> dict:
    """What the budget says measurements *should* be, given the traffic observed.

    The KV capacity is the engine's where it reports one (``kv_capacity``);
    ``expected.kv_capacity_from_engine`` says which was used (1 engine, 0 budget)."""
    kv = kv_capacity(budget, observations, now)
    capacity = kv.tokens
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
    # A window in which fewer than MIN_MEAN_OBSERVATIONS requests started (finished) has
    # no length of its own: tokens over a request or two are an anecdote, and the tokens
    # of requests still running are divided among them (seconds after a storm, 333 tokens
    # a second over 0.075 finishes read as outputs of 4,400). The engine's averages since
    # it started stand in where it reports them (probes.observe.lifetime_lengths).
    if avg_prompt is None or _anecdote(observations, "ttft_window_count", now):
        avg_prompt = _lifetime(observations, "prompt_tokens_per_request", now) or avg_prompt
    if avg_output is None or _anecdote(observations, "e2e_window_count", now):
        avg_output = _lifetime(observations, "output_tokens_per_request", now) or avg_output
    # What the running requests can hold: prompt plus, on average, half their output, in
    # whole KV blocks where the engine says how big they are.
    kv_of_running = (
        min(1.0, running * held_tokens(avg_prompt + avg_output / 2, kv.block_size) / capacity)
        if running is not None and avg_prompt and avg_output is not None
        else None
    )
    # The estimate above assumes a steady state: requests finish at the rate they start and
    # those running sit, on average, halfway through their output. A preemption storm
    # breaks it (preempted requests recompute their tokens, finishes stall, and the requests
    # left running are the ones that got furthest: the scheduler evicts the latest
    # arrivals), so "held by the running requests" reads low: 0.62 of the cache where they
    # held 0.975 (a drawn KV storm, the pressure vetoed and a leak confirmed). Where
    # preemptions show in the window, a claim that KV is held by nobody is measured against
    # every running request at its full length (``expected.kv_usage_of_running_most``);
    # outside a storm the two are the same.
    kv_of_running_most = kv_of_running
    if kv_of_running is not None and _preempting(observations, now):
        kv_of_running_most = min(
            1.0,
            running * held_tokens(avg_prompt + avg_output, kv.block_size) / capacity,  # type: ignore[operator]
        )
    # The context a sequence reaches by its last token, in whole blocks: what a seat holds
    # at its peak. The current average (``avg_context``) is a snapshot mid-decode and reads
    # low by half an output (and lower still between bursts); a seat cap sized on it let a
    # real vLLM's fixed engine fill its cache (300-token prompts, ~600-token outputs,
    # 128-token blocks). Where output lengths are unknown the snapshot is all there is.
    context_reached = avg_context
    if avg_prompt and avg_output is not None:
        reached = held_tokens(avg_prompt + avg_output, kv.block_size)
        context_reached = reached if avg_context is None else max(avg_context, reached)
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
    # How much slower than the budget's constants the GPUs run: the slowest loaded rank's
    # SM clock against the full clock (every step waits for the slowest rank at its
    # all-reduce; compute-bound prefill scales with the clock). 1 when no clock is known:
    # without dcgm the budget's arithmetic stands as it is.
    loaded = Measure("gpu_sm_clock_mhz", "dcgm", "min", 300, where=("gpu_gpu_util_pct", ">=", 50))
    slowest = reduce(loaded, observations, now)
    clock_stretch = (
        max(1.0, full_clock / slowest) if full_clock and slowest and slowest > 0 else 1.0
    )
    decoding = reduce(Measure("requests_running", "engine", "mean", 300), observations, now)
    lane_rate = prompt_rate
    if avg_prompt and (first_tokens := observed_rate(observations, "ttft", now)) is not None:
        lane_rate = avg_prompt * first_tokens
    prefill_wall_s = prefill_wall(budget, avg_prompt, lane_rate, decoding or 0.0, clock_stretch)
    # The chunk budget the engine logged at its last start (vLLM's "Chunked prefill is
    # enabled with max_num_batched_tokens=N", SGLang's chunked_prefill_size), None where no
    # log says or the last start's line is not read yet (vocabulary.UNKNOWN_MARKS).
    logged = gather(Measure("log_chunk_budget_tokens", "log", "last", 604800), observations, now)
    return {
        "expected.engine_chunk_budget_tokens": logged.value,
        "expected.prefill_wall_s": prefill_wall_s,
        "expected.clock_stretch": clock_stretch,
        "expected.full_sm_clock_mhz": full_clock,
        "expected.kv_capacity_tokens": float(capacity),
        "expected.kv_capacity_from_engine": 1.0 if kv.from_engine else 0.0,
        "expected.kv_block_size": kv.block_size,
        "expected.step_ceiling_s": b.mixed_step_ceiling_ms(budget) / 1000,
        "expected.chunk_cost_s": b.chunk_cost_ms(budget) / 1000,
        "expected.avg_prompt_tokens": avg_prompt,
        "expected.avg_context_tokens": avg_context,
        "expected.context_reached_tokens": context_reached,
        "expected.kv_usage_of_running": kv_of_running,
        "expected.kv_usage_of_running_most": kv_of_running_most,
        "expected.prefill_s": prefill_s,
    }


def observed_rate(observations: Observations, histogram: str, now: float) -> float | None:
    """Observations a second that the latest window actually counted: its
    ``<histogram>_window_count`` over the seconds of scrapes behind it (``scrape_span_s``).

    A probe's rates are PromQL's: the increase extrapolated over the probe's whole window
    (60 s), so a window the scrapes cover only in part (an investigation polled for 10 s)
    reads a fraction of the true rate, as Prometheus does before a range fills (eight times
    too low after two polls 5 s apart). Ratios of two such rates hold (prompt tokens per
    first token); an absolute rate, a prefill lane's load, does not. None where either is
    missing or the span is empty."""
    counted = reduce(Measure(f"{histogram}_window_count", "engine", "last", 300), observations, now)
    span = reduce(Measure("scrape_span_s", "engine", "last", 300), observations, now)
    if counted is None or not span or span <= 0:
        return None
    return counted / span


# Past this share of the prefill lane busy, the wall time a prompt's prefill takes is the
# queue's, not the kernels': no expectation is given (a check against it is inconclusive).
MAX_PREFILL_LANE_LOAD = 0.9


def prefill_wall(
    budget: b.Budget,
    avg_prompt: float | None,
    prompt_rate: float | None,
    decoding: float = 0.0,
    stretch: float = 1.0,
) -> float | None:
    """The wall time one prompt's prefill should take beside the requests it shares the
    engine's steps with.

    ``expected.prefill_s`` is a prompt alone: a full chunk a step. An engine's prefill
    time runs from a request's first scheduling to its first token, and each step's token
    budget goes to the running decodes first (one token each), so the prompts get
    ``max_num_batched_tokens - decoding`` tokens a step; those are shared by every prompt
    being prefilled, busy a share ``u`` of the time (prompt tokens a second x a step's
    seconds / the prompts' tokens a step, at the clocks the GPUs run), and each prompt's
    chunks come 1 / (1 - u) as slowly, as in any processor-sharing server. Healthy draws
    read twice ``prefill_s`` and confirmed "slow prefill" on this arithmetic alone.
    Without a prompt rate the steps are taken as the prompt's own; where the decodes or
    the prompts leave less than ``1 - MAX_PREFILL_LANE_LOAD`` of the budget there is no
    expectation (the wait is the queue's, not the kernels')."""
    if not avg_prompt:
        return None
    chunk = budget.max_num_batched_tokens
    per_step = chunk - max(0.0, decoding)
    if per_step < chunk * (1 - MAX_PREFILL_LANE_LOAD):
        return None
    steps = max(1, math.ceil(avg_prompt / per_step))
    step_s = b.mixed_step_ceiling_ms(budget) / 1000
    load = (prompt_rate or 0.0) * step_s * stretch / per_step
    if load >= MAX_PREFILL_LANE_LOAD:
        return None
    return steps * step_s / (1 - load)


def capacity_source(expected: Mapping[str, float | None]) -> str:
    """Which KV capacity ``expected_values`` used, as the budget panel says it."""
    return FROM_ENGINE if expected.get("expected.kv_capacity_from_engine") else FROM_BUDGET


def _scope(budget: b.Budget, expected: Mapping, observed: Mapping, baseline: Mapping) -> dict:
    scope: dict[str, float | None] = {
        f"budget.{name}": float(getattr(budget, name)) for name in b.Budget.__dataclass_fields__
    }
    scope.update(expected)
    scope.update({f"observed.{k.replace('-', '_')}": v for k, v in observed.items()})
    scope.update({f"baseline.{k}": v for k, v in baseline.items()})
    return scope


def playbook_functions(budget: b.Budget, capacity_tokens: float | None = None) -> dict:
    """The budget's functions a playbook may call; ``capacity_tokens`` is the KV capacity
    evaluation used (the engine's where it reported one), so a fix sized from the observed
    context divides by the same pool the context was measured in."""
    return {
        **FUNCTIONS,
        "seqs_for_occupancy": lambda avg, target: b.max_num_seqs_for_occupancy(
            budget, avg, target, capacity_tokens=capacity_tokens
        ),
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
    check: Check,
    measured: float | None,
    scope: Mapping,
    no_data: str = "no data in the window",
    evidence: Evidence | None = None,
) -> CheckResult:
    """Confirm, eliminate or inconclusive, and why. With its ``evidence``, a value that
    crosses a threshold counts only if the data behind it could have shown the other
    side: a rate needs the span in which about three events were expected at the
    threshold, a gauge's reduction its samples, a quantile its whole bucket on one side."""
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
    if evidence is not None:
        base.update(
            first_at=evidence.first_at,
            last_at=evidence.last_at,
            samples=evidence.samples,
            span_s=evidence.span_s,
            interval=evidence.interval,
            count=evidence.count,
        )
    if measured is None:
        reason = evidence.withheld if evidence is not None and evidence.withheld else no_data
        held = "observations" if evidence is not None and evidence.withheld else ""
        return CheckResult(**base, outcome=INCONCLUSIVE, reason=reason, held=held)
    for outcome, condition, at in (
        (CONFIRM, check.confirm, confirm_at),
        (ELIMINATE, check.eliminate, eliminate_at),
    ):
        if condition is None or at is None or not compare(condition.op, measured, at):
            continue
        reason = f"{measured:.4g} {condition.op} {at:.4g}"
        if evidence is not None:
            waiting = _held_back(check, condition.op, at, evidence)
            if waiting is not None:
                kind, why, needs = waiting
                return CheckResult(
                    **base,
                    outcome=INCONCLUSIVE,
                    reason=f"{reason}, but {why}",
                    held=kind,
                    needs_s=needs,
                )
            if evidence.interval is not None:
                reason += f" (bucket {bucket_text(evidence.interval)})"
        return CheckResult(**base, outcome=outcome, reason=reason)
    missing = "; ".join(m for m in (confirm_missing, eliminate_missing) if m)
    reason = missing or f"{measured:.4g} is between the thresholds"
    if check.confirm is None and check.eliminate is None:
        reason = f"{measured:.4g}"  # a veto that only holds back: its clearing says the rest
    if not missing and evidence is not None and evidence.interval is not None:
        reason += f" (bucket {bucket_text(evidence.interval)})"
    if check.clears is not None:
        clears_at, clears_missing = threshold_of(check.clears, scope)
        base["clears_threshold"] = clears_at
        if clears_at is None:
            return CheckResult(
                **base, outcome=INCONCLUSIVE, reason=f"{reason}; {clears_missing}", in_doubt=True
            )
        if not compare(check.clears.op, measured, clears_at):
            reason += f", short of clearing ({check.clears.op} {clears_at:.4g})"
            # A veto that only holds back says the cause's evidence is muddied until it
            # clears (re-prefill in a prefill time): the cause waits on it, as on data.
            held = MUDDIED if check.eliminate is None else ""
            return CheckResult(
                **base, outcome=INCONCLUSIVE, reason=reason, in_doubt=True, held=held
            )
    return CheckResult(**base, outcome=INCONCLUSIVE, reason=reason)


def bucket_json(interval: tuple[float, float] | None) -> list[float | None] | None:
    """A bucket for JSON (jsonb refuses Infinity): an unbounded end is null."""
    if interval is None:
        return None
    return [bound if math.isfinite(bound) else None for bound in interval]


def bucket_text(interval: tuple[float, float]) -> str:
    lo, hi = interval
    return f"{lo:.4g} to {hi:.4g}" if math.isfinite(hi) else f"above {lo:.4g}"


def _wholly(op: str, interval: tuple[float, float], threshold: float) -> bool:
    """Every value of the bucket ``(lo, hi]`` meets ``op threshold``."""
    lo, hi = interval
    return {
        ">": lo >= threshold,
        ">=": lo >= threshold,
        "<": hi < threshold,
        "<=": hi <= threshold,
    }[op]


NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def bucket_decides(op: str, interval: tuple[float, float], threshold: float) -> bool | None:
    """Whether a quantile known only to lie in the bucket ``(lo, hi]`` meets ``op
    threshold``: True when every value of the bucket does, False when none does, None
    when the bucket straddles the threshold (the interpolated value is a guess there)."""
    if op not in NEGATED:
        return None
    if _wholly(op, interval, threshold):
        return True
    if _wholly(NEGATED[op], interval, threshold):
        return False
    return None


def required_span_s(op: str, threshold: float, min_rate: float | None) -> float:
    """Seconds of data a rate needs before ``rate op threshold`` is evidence.

    "Above" a threshold of zero takes one event, and the count shows it at once. Any
    other claim is about how often events come: "below r" (r = the threshold, or the
    smallest rate that matters when that is larger: a threshold of 0 would need forever)
    holds once r would have given ``EXPECTED_EVENTS`` in the span; "above r" the same.
    """
    above = op in (">", ">=")
    if above and threshold <= 0:
        return 0.0
    rate = threshold if above else max(threshold, min_rate or DEFAULT_MIN_RATE)
    return EXPECTED_EVENTS / rate if rate > 0 else math.inf


def _held_back(
    check: Check, op: str, threshold: float, evidence: Evidence
) -> tuple[str, str, float | None] | None:
    """(held, why, seconds needed) when the data cannot carry ``op threshold`` yet."""
    if evidence.interval is not None and not _wholly(op, evidence.interval, threshold):
        return (
            "bucket",
            f"the quantile lies in the bucket {bucket_text(evidence.interval)}, "
            f"on both sides of {threshold:.4g}",
            None,
        )
    rare = _too_rare(check, op, evidence)
    if rare is not None:
        return ("rare", rare, None)
    if evidence.kind == "rate":
        needed = required_span_s(op, threshold, check.min_rate)
        if evidence.span_s < needed:
            more = needed - evidence.span_s
            return (
                "span",
                f"{evidence.span_s:.0f} s of data: needs ≥ {math.ceil(more)} s more data "
                f"({EXPECTED_EVENTS:g} events at the rate that matters take {needed:.0f} s)",
                more,
            )
    if evidence.kind == "gauge":
        reducer = check.measure.reduce
        needed_samples = _SAMPLES.get(reducer, 1)
        if op in _BOUNDED_BY_ONE.get(reducer, ()):
            needed_samples = 1
        if evidence.samples < needed_samples:
            return (
                "samples",
                f"{evidence.samples} sample(s) in the window: needs ≥ {needed_samples} "
                f"for its {reducer}",
                None,
            )
        if op in _WINDOW_CLAIMS.get(reducer, ()):
            needed = check.measure.window_s * WINDOW_COVERAGE
            if evidence.span_s < needed:
                more = needed - evidence.span_s
                return (
                    "span",
                    f"{evidence.span_s:.0f} s of data: needs ≥ {math.ceil(more)} s more data "
                    f"(its {reducer} claims the {check.measure.window_s} s window, "
                    f"seen over {needed:.0f} s at least)",
                    more,
                )
    return None


def quantile_of(signal: str) -> float | None:
    """The quantile a signal's name carries (``iteration_tokens_p99`` -> 0.99)."""
    match = _QUANTILE.search(signal)
    return float(f"0.{match.group(1)}") if match else None


def _too_rare(check: Check, op: str, evidence: Evidence) -> str | None:
    """Why "stayed below" cannot rule out a cause that matters in a share ``check.rarest``
    of the steps, or None. A quantile q does not see values in a share of 1 - q or less
    (at exactly 1 - q the rank sits on the edge between the cause's steps and the rest:
    a p99 reads 256 tokens while one step in a hundred carries 4,096). A trace's maximum
    sees the share once it would have put EXPECTED_EVENTS steps in the trace."""
    rarest = check.rarest
    if rarest is None or op not in ("<", "<="):
        return None
    q = quantile_of(check.measure.signal) if evidence.kind == "quantile" else None
    if q is not None:
        if 1 - q >= rarest - 1e-12:
            return (
                f"a p{check.measure.signal.rsplit('_p', 1)[1]} does not see steps rarer "
                f"than 1 in {1 / (1 - q):.0f}, and the cause matters from 1 in {1 / rarest:.0f}"
            )
        return None
    if (check.measure.source, check.measure.signal) in STEP_COUNTED:
        needed = math.ceil(EXPECTED_EVENTS / rarest)
        if evidence.count is None or evidence.count < needed:
            seen = "an unknown number of" if evidence.count is None else f"{evidence.count:.0f}"
            return (
                f"{seen} steps in the trace: needs ≥ {needed} steps to see a cause in 1 step "
                f"of {1 / rarest:.0f} ({EXPECTED_EVENTS:g} expected)"
            )
    return None


def unjudged(result: CheckResult) -> bool:
    """The check could not be judged at all: no value, a threshold nobody can compute, or a
    value the data behind it cannot carry yet (as opposed to a value between thresholds)."""
    if result.outcome != INCONCLUSIVE:
        return False
    no_threshold = (
        result.confirm_threshold is None
        and result.eliminate_threshold is None
        and result.clears_threshold is None
    )
    return result.measured is None or no_threshold or bool(result.held)


def _suggestion(results: Sequence[CheckResult], checks: Sequence[Check] = ()) -> Suggestion:
    optional = {c.id for c in checks if c.optional}
    vetoes = {c.id for c in checks if c.veto}
    if any(r.id in vetoes and r.outcome == ELIMINATE for r in results):
        return ELIMINATE
    # Optional checks and vetoes (which can only rule out) never hold a confirmation back
    # by a value that does not rule out; a veto that could not be judged at all does. The
    # veto tells this cause from one with the same signature (full KV held by running
    # requests or by nobody): its absence is not a pass. Nor is a value short of a veto's
    # clearing condition (Check.clears): the rival it tells apart is not ruled out. An
    # optional veto is one whose evidence may never come (an engine's start-up line read
    # only by a log followed from the start): with it, it rules out; without, it is silent.
    quiet = optional | vetoes
    outcomes = [r.outcome for r in results if not (r.id in quiet and r.outcome == INCONCLUSIVE)]
    if ELIMINATE in outcomes and CONFIRM not in outcomes:
        return ELIMINATE
    if outcomes and all(o == CONFIRM for o in outcomes):
        if any(
            r.id in vetoes and ((unjudged(r) and r.id not in optional) or r.in_doubt)
            for r in results
        ):
            return INCONCLUSIVE
        return CONFIRM
    return INCONCLUSIVE


def _likelihood(results: Sequence[CheckResult]) -> float:
    ratio = 1.0
    for result in results:
        if result.outcome == CONFIRM:
            ratio *= CONFIRM_LR
        elif result.outcome == ELIMINATE:
            ratio *= ELIMINATE_LR
    return ratio


def plan_fix(fix: Fix, budget: b.Budget, scope: Mapping) -> FixPlan:
    """Compute the fix's parameters; a parameter that cannot be computed is named."""
    functions = playbook_functions(budget, scope.get("expected.kv_capacity_tokens"))
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


def _measure_key(measure: Measure) -> tuple:
    return (
        measure.source,
        measure.signal,
        measure.reduce,
        measure.window_s,
        tuple(sorted(measure.labels.items())),
        measure.promql,
        measure.where,
    )


def _follow_children(own: Suggestion, children: Sequence[NodeResult]) -> tuple[Suggestion, str]:
    """A parent's suggestion given its children's (a child is a way the parent happens):
    a child that suggests confirm supports the parent (against the parent's own
    elimination the two disagree: inconclusive); all children ruled out rules out a
    parent its own checks do not confirm."""
    if not children:
        return own, ""
    confirming = [c.key for c in children if c.suggestion == CONFIRM]
    if confirming:
        names = ", ".join(confirming)
        if own == ELIMINATE:
            return INCONCLUSIVE, f"its own checks suggest eliminate, but {names} suggests confirm"
        if own != CONFIRM:
            return CONFIRM, f"{names} suggests confirm"
        return own, ""
    if own == INCONCLUSIVE and all(c.suggestion == ELIMINATE for c in children):
        return ELIMINATE, "every child suggests eliminate"
    return own, ""


def _rank_key(node: NodeResult, explained: Mapping[str, float] | None = None) -> tuple:
    """Decided causes first; then causes some evidence of their own supports, before
    any without (a cause with no data never ranks above one with evidence for it); among
    confirmed causes whose share is known, by how much of the alarm each explains; by
    score within each; ruled out by a decision last."""
    tier = 2 if node.state == ELIMINATED else (0 if node.supported else 1)
    share = (explained or {}).get(node.key)
    return (
        node.state != CONFIRMED,
        tier,
        share is None,
        -(share or 0.0),
        -node.score,
        node.key,
    )


def competing_shares(
    playbook: Playbook, causes: Sequence[NodeResult], scope: Mapping, alarm: AlarmResult
) -> tuple[Share, ...]:
    """When two or more causes are confirmed (by a decision or by their evidence), how much
    of the alarm each accounts for through its ``explains`` arithmetic, largest first.
    A cause whose arithmetic has no value (nothing observed yet) has no share; fewer than
    two with one: none (one cause explains what it explains, no competition)."""
    defs = {h.key: h.explains for h in playbook.walk() if h.is_cause and h.explains}
    confirmed = [
        n
        for n in causes
        if n.state != ELIMINATED and (n.state == CONFIRMED or n.suggestion == CONFIRM)
    ]
    if len(confirmed) < 2:
        return ()
    values: dict[str, float] = {}
    for node in confirmed:
        expression = defs.get(node.key)
        if expression is None:
            continue
        try:
            values[node.key] = max(0.0, expression.evaluate(scope))
        except ExpressionError:
            continue
    total = sum(values.values())
    if len(values) < 2 or total <= 0:
        return ()
    excess = (
        alarm.measured - alarm.threshold
        if alarm.firing and alarm.measured is not None and alarm.threshold is not None
        else None
    )
    return tuple(
        Share(key, value, value / total, value / excess if excess else None)
        for key, value in sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))
    )


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
    evidence: dict[str, Evidence] = {}
    no_data: dict[str, str] = {}
    for node in playbook.walk():
        for check in node.checks:
            evidence[check.id] = gather(check.measure, observations, now)
            counter = STEP_COUNTED.get((check.measure.source, check.measure.signal))
            if check.rarest is not None and counter is not None:
                steps = reduce(
                    Measure(counter, check.measure.source, "max", check.measure.window_s),
                    observations,
                    now,
                )
                evidence[check.id] = replace(evidence[check.id], count=steps)
            observed[check.id] = evidence[check.id].value
            if observed[check.id] is None and (
                n := unrecognised_errors(check.measure, observations, now)
            ):
                no_data[check.id] = (
                    f"no count: {n:g} log lines looked like errors no known event matches"
                )
    scope = _scope(budget, expected, observed, baseline or {})
    alarm = evaluate_alarm(playbook.alarm, observations, now, scope)

    def visit(node: Hypothesis, inherited: float, counted: frozenset) -> NodeResult:
        results = tuple(
            evaluate_check(
                c,
                observed[c.id],
                scope,
                no_data.get(c.id, "no data in the window"),
                evidence[c.id],
            )
            for c in node.checks
        )
        # Evidence an ancestor already counted (the same measurement, the same outcome)
        # is not counted again down the path: a deep queue backs every child of "the
        # queue is deep" equally and tells them apart not at all.
        keys = [
            (_measure_key(c.measure), r.outcome) for c, r in zip(node.checks, results, strict=True)
        ]
        fresh = [r for r, key in zip(results, keys, strict=True) if key not in counted]
        if any(r.held == MUDDIED for r in results):
            # A confirmation on evidence a veto says is muddied (prefill time inflated by
            # re-prefill) is no support: it must not lift the cause above the one whose
            # signature muddies it (a leak's preemptions made "slow prefill" rank first).
            fresh = [r for r in fresh if r.outcome != CONFIRM]
        score = inherited * node.prior * _likelihood(fresh)
        state = decisions.get(node.key, OPEN)
        if state == ELIMINATED:
            score = 0.0
        children = tuple(visit(child, score, counted | frozenset(keys)) for child in node.children)
        suggestion, note = _follow_children(_suggestion(results, node.checks), children)
        fix = plan_fix(node.fix, budget, scope) if node.fix else None
        return NodeResult(
            node.key,
            node.title,
            node.is_cause,
            state,
            suggestion,
            score,
            results,
            children,
            fix,
            note,
        )

    nodes = tuple(visit(node, 1.0, frozenset()) for node in playbook.hypotheses)
    causes: list[NodeResult] = []
    stack = list(nodes)
    while stack:
        result = stack.pop()
        if result.is_cause:
            causes.append(result)
        stack.extend(result.children)
    shares = competing_shares(playbook, causes, scope, alarm)
    explained = {s.key: s.explains for s in shares}
    ranking = tuple(n.key for n in sorted(causes, key=lambda n: _rank_key(n, explained)))
    return Evaluation(alarm, nodes, expected, ranking, shares)


def evaluate_alarm(
    criterion: Criterion, observations: Observations, now: float, scope: Mapping
) -> AlarmResult:
    measured = reduce(criterion.measure, observations, now)
    threshold, _ = threshold_of(criterion.when, scope)
    if measured is None or threshold is None:
        return AlarmResult(measured, None, threshold)
    return AlarmResult(measured, compare(criterion.when.op, measured, threshold), threshold)
