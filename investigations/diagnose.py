"""Diagnosis without a worker or a database: poll endpoints in-process for a few cycles,
keep the observations in memory and evaluate the symptom's playbook.

The same collectors, parsers and evaluation as the Celery path, so a terminal or a
script (or a drill) gets the ranked tree the console would show.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from deployments.budget import Budget
from investigations.evaluation import CheckResult, Evaluation, NodeResult, bucket_json, evaluate
from investigations.observations import series_labels
from investigations.playbook import Playbook
from probes.collect import fetch_all, query_all
from probes.kinds import Fetch, ProbeKind, Read, by_option
from probes.logfile import LogOffsetError
from probes.net import FetchPolicy, ProbeError

MAX_CYCLES = 1000
MAX_UNRECOGNISED_SHOWN = 5


@dataclass
class Endpoint:
    kind: str  # the diagnose option naming its probe kind: engine | dcgm | log | prometheus
    url: str
    index: int
    history: list = field(default_factory=list)  # earlier snapshots, for windowed stats
    previous: dict = field(default_factory=dict)  # the last snapshot (a followed log's state)
    offset: int = 0
    errors: list[str] = field(default_factory=list)
    # Log lines that looked like errors and matched no known event (shown to the user:
    # they are why a zero count of OOMs or captures stays inconclusive).
    unrecognised: list[str] = field(default_factory=list)


class Diagnosis:
    """Accumulates observations across cycles; ``evaluate`` can be called after any cycle."""

    def __init__(
        self,
        playbook: Playbook,
        budget: Budget,
        endpoints: Sequence[tuple[str, str]],
        policy: FetchPolicy,
        *,
        window_s: float = 60.0,
    ) -> None:
        self.playbook = playbook
        self.budget = budget
        self.policy = policy
        self.window_s = window_s
        self.endpoints = [Endpoint(kind, url, i) for i, (kind, url) in enumerate(endpoints)]
        self.observations: dict[tuple[str, str], dict[str, list]] = defaultdict(
            lambda: defaultdict(list)
        )
        # What a PromQL kind's endpoints evaluate: the measures that carry a query.
        self.queries = {m.signal: m.promql for m in playbook.measures() if m.promql is not None}
        self.artifacts: list[dict] = []
        self.artifact_errors: dict[str, str] = {}

    def _add(self, source: str, endpoint: Endpoint, now: float, found) -> None:
        for signal, labels, value in found:
            tagged = series_labels(source, str(endpoint.index), labels)
            if tagged is not None:
                self.observations[(source, signal)][tagged].append((now, value))

    def cycle(self, now: float | None = None) -> None:
        """Poll every endpoint once (concurrently) and keep what they said."""
        now = time.time() if now is None else now
        scraped = [e for e in self.endpoints if by_option(e.kind).fetch is Fetch.GET]
        requests = [(str(e.index), self._url(e)) for e in scraped]
        for fetched, endpoint in zip(fetch_all(requests, self.policy), scraped, strict=True):
            if fetched.error is not None:
                endpoint.errors.append(str(fetched.error))
                continue
            result = fetched.result
            kind = by_option(endpoint.kind)
            if self._observe(endpoint, result.body, now) and kind.follows:
                try:
                    endpoint.offset = kind.next_offset(endpoint.offset, result.body, result.headers)
                except LogOffsetError as exc:  # the relay's offset is not one: say so, keep ours
                    endpoint.errors.append(str(exc))
        for endpoint in self.endpoints:
            if by_option(endpoint.kind).fetch is Fetch.HOST:
                self._read_here(endpoint, now)
        jobs = [
            (str(e.index), name, e.url, promql)
            for e in self.endpoints
            if by_option(e.kind).fetch is Fetch.PROMQL
            for name, promql in self.queries.items()
        ]
        by_index = {str(e.index): e for e in self.endpoints}
        for queried in query_all(jobs, self.policy, at=now):
            endpoint = by_index[queried.key]
            if queried.error is not None:
                endpoint.errors.append(f"{queried.name}: {queried.error}")
                continue
            kind = by_option(endpoint.kind)
            seen = _observer(kind)(_read([(queried.name, queried.result)], now))
            self._add(kind.source.name, endpoint, now, seen.observations)

    def _url(self, endpoint: Endpoint) -> str:
        return by_option(endpoint.kind).url(endpoint.url, endpoint.offset)

    def _read_here(self, endpoint: Endpoint, now: float) -> None:
        """A host kind (an engine log file) read where the command runs, as a worker on
        that host would. The path is the operator's own, so the only root is its folder."""
        kind = by_option(endpoint.kind)
        if kind.read_here is None:  # diagnose only offers host kinds that read here
            raise ValueError(f"{kind.value} targets cannot be read by diagnose")
        path = Path(endpoint.url)
        try:
            here = kind.read_here(str(path), endpoint.offset, (path.resolve().parent,))
        except ProbeError as exc:
            endpoint.errors.append(str(exc))
            return
        if self._observe(endpoint, here.body, now) and here.next_offset is not None:
            endpoint.offset = here.next_offset

    def _observe(self, endpoint: Endpoint, body, now: float) -> bool:
        """One body through its kind's observer, as the Celery path does: the windowed
        history and a followed log's state are what the poll rows would hold. False
        (and the error kept) when the body was unusable."""
        kind = by_option(endpoint.kind)
        read = _read(body, now, self.window_s, endpoint.history, endpoint.previous)
        try:
            seen = _observer(kind)(read)
        except ValueError as exc:  # every parser's "unusable" error is a ValueError
            endpoint.errors.append(f"unusable response: {exc}")
            return False
        endpoint.history = [*endpoint.history, (now, seen.snapshot)][-64:]
        endpoint.previous = seen.snapshot
        room = MAX_UNRECOGNISED_SHOWN - len(endpoint.unrecognised)
        endpoint.unrecognised.extend(seen.snapshot.get("unrecognised", [])[: max(room, 0)])
        self._add(kind.source.name, endpoint, now, seen.observations)
        return True

    def add_artifact(self, label: str, analysis: dict, now: float | None = None) -> None:
        """An analysed profiler artifact's signals as evidence at ``now`` (source artifact)."""
        now = time.time() if now is None else now
        self.artifacts.append({"artifact": label, "kind": analysis.get("kind"), **analysis})
        for signal, value in analysis.get("signals", {}).items():
            self.observations[("artifact", signal)][f"artifact={label}"].append((now, value))

    def evaluate(self, now: float | None = None) -> Evaluation:
        view = {
            key: [(labels, points) for labels, points in series.items()]
            for key, series in self.observations.items()
        }
        return evaluate(self.playbook, self.budget, view, time.time() if now is None else now)


def _observer(kind: ProbeKind):
    if kind.observe is None:  # diagnose only offers kinds that have one
        raise ValueError(f"{kind.value} targets are not observed by a poll")
    return kind.observe


def _read(body, now: float, window_s: float = 60.0, history=(), previous=None) -> Read:
    return Read(
        body,
        at=datetime.fromtimestamp(now, tz=UTC),
        epoch=now,
        window_s=window_s,
        history=history,
        previous=previous or {},
    )


def run(
    diagnosis: Diagnosis,
    *,
    cycles: int,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Evaluation:
    if not 1 <= cycles <= MAX_CYCLES:
        raise ValueError(f"cycles must be between 1 and {MAX_CYCLES}")
    for n in range(cycles):
        started = time.monotonic()
        diagnosis.cycle()
        if n + 1 < cycles:
            sleep(max(0.0, interval_s - (time.monotonic() - started)))
    return diagnosis.evaluate()


def check_json(c: CheckResult) -> dict:
    """A check's outcome with the data behind it: its span (first/last sample, how many,
    seconds covered) beside its window, a quantile's bucket, a mean's observations, and
    ``needs_more_data`` when a crossing is held back (``needs_s``: seconds still missing)."""
    return {
        "check": c.id,
        "title": c.title,
        "measured": c.measured,
        "outcome": c.outcome,
        "reason": c.reason,
        "confirm_threshold": c.confirm_threshold,
        "eliminate_threshold": c.eliminate_threshold,
        "window_s": c.window_s,
        "span": {
            "first_at": c.first_at,
            "last_at": c.last_at,
            "samples": c.samples,
            "seconds": round(c.span_s, 3),
        },
        "bucket": bucket_json(c.interval),
        "observations": c.count,
        "needs_more_data": c.needs_more or None,
        "needs_s": None if c.needs_s is None else math.ceil(c.needs_s),
    }


def node_json(node: NodeResult) -> dict:
    return {
        "key": node.key,
        "title": node.title,
        "cause": node.is_cause,
        "state": node.state,
        "suggestion": node.suggestion,
        "note": node.note,
        "score": round(node.score, 6),
        "evidence_count": node.evidence_count,
        "evidence": [check_json(c) for c in node.checks],
        # What a commander who confirms this cause would apply: the root cause's fix is
        # also the report's ``fix``; a cause held back by a veto in doubt has one too.
        "fix": fix_json(node),
        "children": [node_json(child) for child in node.children],
    }


def ranking_lines(result: Evaluation) -> list[str]:
    """The "most likely first" list as text: state, suggestion, score and how many checks
    have data ("no data" where none has), then each check that waits for more data."""
    lines = []
    for n, key in enumerate(result.ranking, 1):
        node = result.find(key)
        evidence = f"{node.evidence_count} with data" if node.evidence_count else "no data"
        lines.append(
            f"  {n:2}. {key:26} {node.state:10} suggests {node.suggestion:12} "
            f"score {node.score:9.4f}  {evidence}"
        )
        share = next((s for s in result.shares if s.key == key), None)
        if share is not None:
            excess = (
                f", {100 * share.of_excess:.0f} % of the alarm's excess"
                if share.of_excess is not None
                else ""
            )
            lines.append(
                f"        explains {share.explains:.4g} of the alarm "
                f"({100 * share.share:.0f} % of what the confirmed causes explain{excess})"
            )
        for c in node.checks:
            if c.measured is None and not c.held:
                continue
            span = f"{c.samples} sample(s) over {c.span_s:.0f} s of a {c.window_s} s window"
            more = f"; {c.needs_more}" if c.held else ""
            lines.append(f"        {c.id}: {c.outcome} ({c.reason}); {span}{more}")
    return lines


def fix_json(node: NodeResult) -> dict | None:
    """A hypothesis's fix as planned from the live window, or None where it has none."""
    if node.fix is None:
        return None
    return {
        "key": node.fix.key,
        "title": node.fix.title,
        "parameters": dict(node.fix.parameters),
        "apply": dict(node.fix.apply),
        "command": node.fix.command,
        "problems": list(node.fix.problems),
    }


def evaluation_json(result: Evaluation, diagnosis: Diagnosis | None = None) -> dict:
    """The shape scripts rely on: hypotheses, root_cause (or null), fix, ranking."""
    top = result.find(result.ranking[0]) if result.ranking else None
    root = top if top is not None and top.suggestion == "confirm" else None
    fix = fix_json(root) if root is not None else None
    out = {
        "alarm": {
            "measured": result.alarm.measured,
            "threshold": result.alarm.threshold,
            "firing": result.alarm.firing,
        },
        "ranking": list(result.ranking),
        "ranked": [
            {
                "key": key,
                "state": result.find(key).state,
                "suggestion": result.find(key).suggestion,
                "score": round(result.find(key).score, 6),
                "evidence_count": result.find(key).evidence_count,
            }
            for key in result.ranking
        ],
        "root_cause": root.key if root else None,
        # Several confirmed causes: how much of the alarm each accounts for (its
        # ``explains`` arithmetic, in the alarm's unit), largest first.
        "shares": [
            {
                "key": s.key,
                "explains": round(s.explains, 6),
                "share": round(s.share, 4),
                "of_excess": None if s.of_excess is None else round(s.of_excess, 4),
            }
            for s in result.shares
        ],
        "fix": fix,
        "hypotheses": [node_json(node) for node in result.nodes],
        "expected": dict(result.expected),
    }
    if diagnosis is not None:
        out["probe_errors"] = {e.url: e.errors[-3:] for e in diagnosis.endpoints if e.errors}
        out["artifacts"] = [
            {
                "artifact": a["artifact"],
                "kind": a.get("kind"),
                "findings": a.get("findings", []),
                "signals": a.get("signals", {}),
            }
            for a in diagnosis.artifacts
        ]
        out["artifact_errors"] = dict(diagnosis.artifact_errors)
        out["log_unrecognised_errors"] = {
            e.url: list(e.unrecognised) for e in diagnosis.endpoints if e.unrecognised
        }
    return out
