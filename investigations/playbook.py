"""Playbooks as data: one versioned YAML file per symptom, validated on load.

A playbook is the method of the seed written down for one symptom: the alarm
measurement, a tree of hypotheses with a rationale and a prior each, the checks
that confirm or eliminate every node (a measurement over a window and a threshold
from the budget or the baseline), and for confirmed causes a fix template whose
parameters are computed, its verification criteria and the alert rule that
becomes the regression gate. The file format is documented in docs/playbooks.md.

Everything is checked when the file is loaded (unknown keys, cause keys, signals,
expressions, duplicate ids), so a broken playbook fails at start-up with the path
of the offending field, never in the middle of an incident.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from deployments.budget import Budget
from investigations.causes import CAUSE_KEYS
from investigations.expressions import (
    FUNCTIONS,
    Expression,
    ExpressionError,
    compile_expression,
)
from probes.vocabulary import SOURCES, companions, known_signal, signal_kind

BUDGET_FIELDS = frozenset(Budget.__dataclass_fields__)
PLAYBOOK_DIR = Path(__file__).resolve().parent / "playbooks"
SCHEMA_VERSION = 1
MAX_FILE_BYTES = 256 * 1024
KEY = re.compile(r"^[a-z][a-z0-9-]{1,47}$")
REDUCERS = ("last", "max", "min", "mean", "sum", "increase", "spread")
# Values evaluation derives from the budget and the observations (docs/playbooks.md).
EXPECTED = frozenset(
    {
        "prefill_s",
        "prefill_wall_s",
        "engine_chunk_budget_tokens",
        "kv_usage_of_running",
        "kv_usage_of_running_most",
        "avg_prompt_tokens",
        "avg_context_tokens",
        "context_reached_tokens",
        "kv_capacity_tokens",
        "step_ceiling_s",
        "chunk_cost_s",
        "full_sm_clock_mhz",
        "clock_stretch",
    }
)
# Budget-aware functions fix parameters may call, on top of min/max/floor/...
PLAYBOOK_FUNCTIONS = ("seqs_for_occupancy", "chunk_for_ceiling")
OPERATORS = ("<", "<=", ">", ">=")


class PlaybookError(ValueError):
    """A playbook file is invalid; the message starts with the file and field path."""


@dataclass(frozen=True)
class Measure:
    signal: str
    source: str
    reduce: str = "last"
    window_s: int = 300
    labels: Mapping[str, str] = field(default_factory=dict)
    promql: str | None = None  # for source "prometheus": what the probe evaluates
    # Only points taken while another signal of the same series met a condition, e.g. SM
    # clocks only while the GPU was loaded: (signal, op, value). See docs/playbooks.md.
    where: tuple[str, str, float] | None = None

    def gate(self) -> Measure | None:
        """The measurement ``where`` reads, so loaders fetch it with this one."""
        if self.where is None:
            return None
        return Measure(self.where[0], self.source, "last", self.window_s)

    def companions(self) -> list[Measure]:
        """What evaluation reads to know how much the value rests on (its span, its
        bucket, its count: ``vocabulary.companions``), so loaders fetch them with it."""
        return [
            Measure(signal, self.source, "last", self.window_s)
            for signal in companions(self.source, self.signal).values()
        ]


@dataclass(frozen=True)
class Condition:
    op: str
    value: Expression


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    measure: Measure
    confirm: Condition | None
    eliminate: Condition | None
    # Corroborating evidence (e.g. a profiler artifact someone may never upload): without
    # data it neither blocks a confirmation nor counts against one.
    optional: bool = False
    # A veto check's elimination eliminates the hypothesis whatever else confirms it: the
    # evidence rules the mechanism out (KV held by no running request is not seat pressure).
    veto: bool = False
    # For a rate: the smallest rate that matters (per second). "No events" eliminates only
    # after a span in which that rate would have shown about three (evaluation.py).
    min_rate: float | None = None
    # The smallest share of engine steps in which the cause matters (0.01: one step in a
    # hundred). "Stayed below" eliminates only on evidence that could have seen a share
    # that small: a quantile deeper than it, a trace of enough steps (evaluation.py).
    rarest: float | None = None
    # A veto's clearing condition: where the veto sets one, a value between it and the
    # elimination (the rival explanation neither shown nor ruled out) holds a confirmation
    # back as an unjudged veto does. KV usage that the running requests only partly
    # account for is no ground to call it seat pressure or plain capacity. A veto with a
    # clearing condition and no elimination only holds back: evidence that muddies the
    # measurement (re-prefill after preemptions inflating prefill time) and says nothing
    # against the cause.
    clears: Condition | None = None


@dataclass(frozen=True)
class Criterion:
    measure: Measure
    when: Condition
    title: str = ""
    # "window": the measure's trailing window; "since-fix": everything since the fix took
    # effect, so a confirming signal that comes back even once fails the verification.
    over: str = "window"
    # A guard watches for a side effect the fix may cause (e.g. higher TTFT from smaller
    # chunks): shown, and flagged when it fails, but it does not decide the verification.
    guard: bool = False


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    summary: str


@dataclass(frozen=True)
class Fix:
    key: str
    title: str
    parameters: Mapping[str, Expression]
    apply: Mapping[str, Expression]  # settings to change, e.g. {"max_num_seqs": ...}
    command: str
    verify: tuple[Criterion, ...]
    verify_window_s: int
    alert: Alert | None
    # Seconds after the fix before its effect is judged (windowed rates still remember
    # the time before it).
    settle_s: int = 0


@dataclass(frozen=True)
class Hypothesis:
    key: str
    title: str
    rationale: str
    prior: float
    checks: tuple[Check, ...]
    children: tuple[Hypothesis, ...]
    fix: Fix | None
    # Auto-apply rules: suggestion -> consecutive poll cycles it must hold before the
    # suggestion becomes an automatic decision (e.g. {"eliminate": 3}).
    auto: Mapping[str, int] = field(default_factory=dict)
    # How much of the alarm's measurement this cause accounts for, in the alarm's unit,
    # through the budget's arithmetic (a slow rank's clock ratio x the budgeted prefill):
    # when several causes are confirmed, each one's share of the magnitude.
    explains: Expression | None = None

    @property
    def is_cause(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class Playbook:
    key: str
    version: int
    title: str
    summary: str
    alarm: Criterion
    hypotheses: tuple[Hypothesis, ...]
    # SHA-256 of the YAML text it was parsed from: an investigation stores it when it opens,
    # so its record says exactly which playbook it followed (investigations/frozen.py).
    digest: str = field(default="", compare=False)

    def walk(self) -> Iterator[Hypothesis]:
        stack = list(reversed(self.hypotheses))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def node(self, key: str) -> Hypothesis:
        for node in self.walk():
            if node.key == key:
                return node
        raise KeyError(key)

    def causes(self) -> list[str]:
        return [node.key for node in self.walk() if node.is_cause]

    def measures(self) -> list[Measure]:
        """Every measurement the playbook reads (alarm, checks, verification)."""
        out = [self.alarm.measure]
        for node in self.walk():
            out += [check.measure for check in node.checks]
            if node.fix:
                out += [criterion.measure for criterion in node.fix.verify]
        out += [gate for m in out if (gate := m.gate()) is not None]
        return out + [companion for m in out for companion in m.companions()]


class _Reader:
    """Walks the parsed YAML, keeping the field path for error messages."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.references: list[tuple[str, str]] = []  # (path, dotted name), checked at the end

    def fail(self, path: str, message: str) -> PlaybookError:
        return PlaybookError(f"{self.name}: {path}: {message}")

    def mapping(self, value: Any, path: str, allowed: set[str], required: set[str]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, "expected a mapping")
        unknown = set(value) - allowed
        if unknown:
            raise self.fail(path, f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        missing = required - set(value)
        if missing:
            raise self.fail(path, f"missing field(s) {', '.join(sorted(missing))}")
        return value

    def text(self, value: Any, path: str, *, limit: int = 2000) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(path, "expected non-empty text")
        if len(value) > limit:
            raise self.fail(path, f"longer than {limit} characters")
        return value.strip()

    def key(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not KEY.match(value):
            raise self.fail(path, "expected a lower-case key like kv-cache-pressure")
        return value

    def number(self, value: Any, path: str, low: float, high: float) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not low <= value <= high
        ):
            raise self.fail(path, f"expected a number in [{low}, {high}]")
        return float(value)

    def expression(self, value: Any, path: str) -> Expression:
        functions = {**FUNCTIONS, **dict.fromkeys(PLAYBOOK_FUNCTIONS)}
        try:
            expression = compile_expression(value, functions=functions)
        except ExpressionError as exc:
            raise self.fail(path, str(exc)) from None
        for name in expression.names:
            scope, _, attr = name.partition(".")
            if scope == "budget" and attr not in BUDGET_FIELDS:
                raise self.fail(path, f"{name}: the budget has no such constant")
            if scope == "expected" and attr not in EXPECTED:
                raise self.fail(path, f"{name}: expected values are {', '.join(sorted(EXPECTED))}")
            self.references.append((path, name))
        return expression

    def measure(self, value: Any, path: str) -> Measure:
        data = self.mapping(
            value, path, {"signal", "source", "reduce", "window", "labels", "promql", "where"},
            {"signal", "source"},
        )  # fmt: skip
        source = data["source"]
        if source not in SOURCES:
            raise self.fail(f"{path}.source", f"expected one of {', '.join(SOURCES)}")
        signal = self.text(data["signal"], f"{path}.signal", limit=64)
        promql = data.get("promql")
        if source == "prometheus":
            if promql is None:
                raise self.fail(path, "a prometheus measure needs its promql")
            promql = self.text(promql, f"{path}.promql", limit=4096)
        elif promql is not None:
            raise self.fail(f"{path}.promql", "only prometheus measures carry promql")
        elif not known_signal(source, signal):
            raise self.fail(f"{path}.signal", f"{signal!r} is not a signal {source} probes record")
        reduce = data.get("reduce", "last")
        if reduce not in REDUCERS:
            raise self.fail(f"{path}.reduce", f"expected one of {', '.join(REDUCERS)}")
        labels = data.get("labels", {})
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise self.fail(f"{path}.labels", "expected a mapping of label name to value")
        window = int(self.number(data.get("window", 300), f"{path}.window", 5, 7 * 86400))
        where = self.where(data["where"], f"{path}.where", source) if "where" in data else None
        return Measure(signal, source, reduce, window, dict(labels), promql, where)

    def where(self, value: Any, path: str, source: str) -> tuple[str, str, float]:
        data = self.mapping(value, path, {"signal", "op", "value"}, {"signal", "op", "value"})
        signal = self.text(data["signal"], f"{path}.signal", limit=64)
        if source == "prometheus" or not known_signal(source, signal):
            raise self.fail(f"{path}.signal", f"{signal!r} is not a signal {source} probes record")
        if data["op"] not in OPERATORS:
            raise self.fail(f"{path}.op", f"expected one of {' '.join(OPERATORS)}")
        return signal, data["op"], self.number(data["value"], f"{path}.value", -1e18, 1e18)

    def condition(self, value: Any, path: str) -> Condition:
        data = self.mapping(value, path, {"op", "value"}, {"op", "value"})
        if data["op"] not in OPERATORS:
            raise self.fail(f"{path}.op", f"expected one of {' '.join(OPERATORS)}")
        return Condition(data["op"], self.expression(data["value"], f"{path}.value"))

    def criterion(self, value: Any, path: str) -> Criterion:
        data = self.mapping(
            value, path, {"measure", "when", "title", "over", "guard"}, {"measure", "when"}
        )
        guard = data.get("guard", False)
        if not isinstance(guard, bool):
            raise self.fail(f"{path}.guard", "expected true or false")
        title = self.text(data["title"], f"{path}.title", limit=200) if "title" in data else ""
        over = data.get("over", "window")
        if over not in ("window", "since-fix"):
            raise self.fail(f"{path}.over", "expected window or since-fix")
        return Criterion(
            self.measure(data["measure"], f"{path}.measure"),
            self.condition(data["when"], f"{path}.when"),
            title,
            over,
            guard,
        )

    def check(self, value: Any, path: str) -> Check:
        data = self.mapping(
            value, path,
            {
                "id", "title", "measure", "confirm", "eliminate", "optional", "veto",
                "min_rate", "rarest", "clears",
            },
            {"id", "title", "measure"},
        )  # fmt: skip
        optional = data.get("optional", False)
        veto = data.get("veto", False)
        for name, flag in (("optional", optional), ("veto", veto)):
            if not isinstance(flag, bool):
                raise self.fail(f"{path}.{name}", "expected true or false")
        if veto and "eliminate" not in data and "clears" not in data:
            raise self.fail(f"{path}.veto", "a veto check needs an eliminate or a clears condition")
        if "clears" in data and not veto:
            raise self.fail(f"{path}.clears", "only a veto check clears")
        if "confirm" not in data and "eliminate" not in data and "clears" not in data:
            raise self.fail(path, "a check must be able to confirm or eliminate")
        measure = self.measure(data["measure"], f"{path}.measure")
        min_rate = None
        if "min_rate" in data:
            if signal_kind(measure.source, measure.signal) != "rate":
                raise self.fail(f"{path}.min_rate", "only a rate has a smallest rate that matters")
            min_rate = self.number(data["min_rate"], f"{path}.min_rate", 1e-9, 1e9)
        rarest = None
        if "rarest" in data:
            rarest = self.number(data["rarest"], f"{path}.rarest", 1e-6, 1.0)
        return Check(
            self.key(data["id"], f"{path}.id"),
            self.text(data["title"], f"{path}.title", limit=200),
            measure,
            self.condition(data["confirm"], f"{path}.confirm") if "confirm" in data else None,
            self.condition(data["eliminate"], f"{path}.eliminate") if "eliminate" in data else None,
            optional,
            veto,
            min_rate,
            rarest,
            self.condition(data["clears"], f"{path}.clears") if "clears" in data else None,
        )

    def fix(self, value: Any, path: str) -> Fix:
        data = self.mapping(
            value, path,
            {
                "key", "title", "parameters", "apply", "command", "verify", "verify_window",
                "alert", "settle",
            },
            {"key", "title", "verify"},
        )  # fmt: skip
        parameters = data.get("parameters", {})
        apply = data.get("apply", {})
        for name, part in (("parameters", parameters), ("apply", apply)):
            if not isinstance(part, dict):
                raise self.fail(f"{path}.{name}", "expected a mapping")
        verify = data["verify"]
        if not isinstance(verify, list) or not verify:
            raise self.fail(f"{path}.verify", "expected a non-empty list of criteria")
        alert = None
        if "alert" in data:
            raw = self.mapping(
                data["alert"], f"{path}.alert", {"name", "expr", "for", "summary"},
                {"name", "expr", "for", "summary"},
            )  # fmt: skip
            if not re.match(r"^[0-9]+[smh]$", str(raw["for"])):
                raise self.fail(f"{path}.alert.for", "expected a duration like 10m")
            alert = Alert(
                self.text(raw["name"], f"{path}.alert.name", limit=100),
                self.text(raw["expr"], f"{path}.alert.expr", limit=4096),
                str(raw["for"]),
                self.text(raw["summary"], f"{path}.alert.summary", limit=500),
            )
        return Fix(
            key=self.key(data["key"], f"{path}.key"),
            title=self.text(data["title"], f"{path}.title", limit=200),
            parameters={
                str(k): self.expression(v, f"{path}.parameters.{k}") for k, v in parameters.items()
            },
            apply={str(k): self.expression(v, f"{path}.apply.{k}") for k, v in apply.items()},
            command=self.text(data["command"], f"{path}.command", limit=1000)
            if "command" in data
            else "",
            verify=tuple(self.criterion(c, f"{path}.verify[{i}]") for i, c in enumerate(verify)),
            verify_window_s=int(
                self.number(data.get("verify_window", 600), f"{path}.verify_window", 60, 7 * 86400)
            ),
            alert=alert,
            settle_s=int(self.number(data.get("settle", 0), f"{path}.settle", 0, 86400)),
        )

    def hypothesis(self, value: Any, path: str, depth: int = 0) -> Hypothesis:
        if depth > 6:
            raise self.fail(path, "hypothesis tree deeper than 6 levels")
        data = self.mapping(
            value, path,
            {"key", "title", "rationale", "prior", "checks", "children", "fix", "auto",
             "explains"},
            {"key", "title", "rationale", "prior"},
        )  # fmt: skip
        key = self.key(data["key"], f"{path}.key")
        auto = self.auto(data.get("auto", {}), f"{path}.auto")
        children_raw = data.get("children", [])
        checks_raw = data.get("checks", [])
        if not isinstance(children_raw, list) or not isinstance(checks_raw, list):
            raise self.fail(path, "checks and children must be lists")
        children = tuple(
            self.hypothesis(c, f"{path}.children[{i}]", depth + 1)
            for i, c in enumerate(children_raw)
        )
        if not children and key not in CAUSE_KEYS:
            raise self.fail(f"{path}.key", f"{key!r} is a leaf but not a documented cause key")
        if children and key in CAUSE_KEYS:
            raise self.fail(f"{path}.key", f"cause key {key!r} must be a leaf")
        if not checks_raw:
            raise self.fail(path, "every hypothesis needs at least one check")
        fix = self.fix(data["fix"], f"{path}.fix") if "fix" in data else None
        if fix and children:
            raise self.fail(f"{path}.fix", "only causes (leaves) carry a fix")
        if "explains" in data and children:
            raise self.fail(f"{path}.explains", "only causes (leaves) explain a share")
        explains = (
            self.expression(data["explains"], f"{path}.explains") if "explains" in data else None
        )
        return Hypothesis(
            key=key,
            title=self.text(data["title"], f"{path}.title", limit=200),
            rationale=self.text(data["rationale"], f"{path}.rationale"),
            prior=self.number(data["prior"], f"{path}.prior", 0.001, 1.0),
            checks=tuple(self.check(c, f"{path}.checks[{i}]") for i, c in enumerate(checks_raw)),
            children=children,
            fix=fix,
            auto=auto,
            explains=explains,
        )

    def auto(self, value: Any, path: str) -> dict[str, int]:
        data = self.mapping(value, path, {"confirm", "eliminate"}, set())
        return {
            str(action): int(self.number(cycles, f"{path}.{action}", 1, 1000))
            for action, cycles in data.items()
        }


def parse_playbook(text: str, name: str = "<playbook>") -> Playbook:
    """Validate and build a playbook from YAML text."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise PlaybookError(f"{name}: larger than {MAX_FILE_BYTES} bytes")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PlaybookError(f"{name}: not valid YAML: {exc}") from None
    reader = _Reader(name)
    data = reader.mapping(
        raw, "$", {"schema", "key", "version", "title", "summary", "alarm", "hypotheses"},
        {"schema", "key", "version", "title", "summary", "alarm", "hypotheses"},
    )  # fmt: skip
    if data["schema"] != SCHEMA_VERSION:
        raise reader.fail("$.schema", f"this version of Atlas reads schema {SCHEMA_VERSION}")
    hypotheses_raw = data["hypotheses"]
    if not isinstance(hypotheses_raw, list) or not hypotheses_raw:
        raise reader.fail("$.hypotheses", "expected a non-empty list")
    playbook = Playbook(
        key=reader.key(data["key"], "$.key"),
        version=int(reader.number(data["version"], "$.version", 1, 10_000)),
        title=reader.text(data["title"], "$.title", limit=200),
        summary=reader.text(data["summary"], "$.summary"),
        alarm=reader.criterion(data["alarm"], "$.alarm"),
        hypotheses=tuple(
            reader.hypothesis(h, f"$.hypotheses[{i}]") for i, h in enumerate(hypotheses_raw)
        ),
        digest=hashlib.sha256(text.encode()).hexdigest(),
    )
    seen_nodes: set[str] = set()
    seen_checks: set[str] = set()
    parameters: set[str] = set()
    for node in playbook.walk():
        if node.key in seen_nodes:
            raise reader.fail("$.hypotheses", f"hypothesis key {node.key!r} appears twice")
        seen_nodes.add(node.key)
        for check in node.checks:
            if check.id in seen_checks:
                raise reader.fail("$.hypotheses", f"check id {check.id!r} appears twice")
            seen_checks.add(check.id)
        if node.fix:
            parameters |= set(node.fix.parameters)
    signals = {m.signal for m in playbook.measures()}
    for path, name in reader.references:
        scope, _, attr = name.partition(".")
        if scope == "observed" and attr.replace("_", "-") not in seen_checks:
            raise reader.fail(path, f"{name}: observed.<check id> must name a check here")
        if scope == "param" and attr not in parameters:
            raise reader.fail(path, f"{name}: no fix parameter of that name")
        if scope == "baseline" and attr not in signals:
            raise reader.fail(path, f"{name}: baseline.<signal> must be a signal measured here")
    return playbook


def load_file(path: Path) -> Playbook:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise PlaybookError(f"{path.name}: larger than {MAX_FILE_BYTES} bytes")
    playbook = parse_playbook(path.read_text(encoding="utf-8"), path.name)
    if playbook.key != path.stem:
        raise PlaybookError(f"{path.name}: key {playbook.key!r} must match the file name")
    return playbook


@cache
def playbooks() -> dict[str, Playbook]:
    """Every playbook shipped with Atlas, by symptom key (loaded once per process)."""
    return {p.key: p for p in (load_file(f) for f in sorted(PLAYBOOK_DIR.glob("*.yaml")))}


def get_playbook(key: str) -> Playbook:
    try:
        return playbooks()[key]
    except KeyError:
        raise PlaybookError(f"no playbook for symptom {key!r}") from None
