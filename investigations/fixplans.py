"""The fix a person is shown, and records: a parameter that holds still, a command for this
deployment.

A fix parameter computed from the live window (``max_num_seqs`` from the average context
now) moves with every refresh: the page said 28, the record said 27, and the command a
person copied was neither. So each poll cycle remembers the parameter's last few raw
values (``settle``), and what is shown is their median, which moves only when the median
leaves a band around the value already shown (hysteresis). The page, the API and the
record all read that one value (``stabilise``), so the value recorded is the value shown;
a form that posts a value that is no longer the one shown is refused, not silently
changed (``views.record_fix``).

The command is the deployment's: ``<model>`` and ``<tp>`` become its model name and its
tensor-parallel size (a model name not configured stays ``<model>``, to be filled in).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import replace

from deployments import budget as b
from investigations.evaluation import Evaluation, FixPlan, NodeResult, playbook_functions
from investigations.expressions import ExpressionError
from investigations.playbook import Fix, Playbook

KEEP_CYCLES = 5  # the stable window: the median of the last five cycles' values
BAND = 0.10  # the median must move more than 10 % from the shown value to replace it


def settle(
    previous: Mapping | None,
    raw: Mapping[str, float],
    *,
    keep: int = KEEP_CYCLES,
    band: float = BAND,
) -> dict:
    """One cycle's raw parameter values folded into ``{"recent": {name: [values]},
    "shown": {name: value}}``. Pure.

    The median is the lower median, always one of the values seen (never 27.5 seats). A
    parameter missing this cycle (it could not be computed) keeps its history untouched.
    """
    previous = previous or {}
    recent = {k: list(v) for k, v in (previous.get("recent") or {}).items()}
    shown = dict(previous.get("shown") or {})
    for name, value in raw.items():
        if not math.isfinite(value):
            continue  # nothing to settle on: the plan names the problem
        values = [*recent.get(name, []), float(value)][-keep:]
        middle = statistics.median_low(values)
        held = shown.get(name)
        if held is None or abs(middle - held) > band * abs(held):
            held = middle
        recent[name], shown[name] = values, held
    return {"recent": recent, "shown": shown}


def _walk(nodes: Iterable[NodeResult]) -> Iterable[NodeResult]:
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children)


def remember(previous: Mapping | None, result: Evaluation) -> dict:
    """Per node with a fix: this cycle's raw parameters settled into what was stored."""
    out = dict(previous or {})
    for node in _walk(result.nodes):
        if node.fix is not None:
            out[node.key] = settle(out.get(node.key), node.fix.parameters)
    return out


def command_for(command: str, *, model: str, tp_size: int) -> str:
    """The template's ``<model>`` and ``<tp>`` filled from the deployment. Pure."""
    if model:
        command = command.replace("<model>", model)
    return command.replace("<tp>", str(tp_size))


def replan(
    template: Fix,
    plan: FixPlan,
    parameters: Mapping[str, float],
    budget: b.Budget,
    expected: Mapping,
    *,
    model: str,
) -> FixPlan:
    """``plan`` with ``parameters`` instead of its own: the settings and the command follow
    from them as ``evaluation.plan_fix`` derives them."""
    scope = {
        **{f"budget.{n}": float(getattr(budget, n)) for n in b.Budget.__dataclass_fields__},
        **expected,
        **{f"param.{k}": float(v) for k, v in parameters.items()},
    }
    functions = playbook_functions(budget, expected.get("expected.kv_capacity_tokens"))
    apply = dict(plan.apply)
    problems = list(plan.problems)
    for name, expression in template.apply.items():
        try:
            apply[name] = expression.evaluate(scope, functions)
        except ExpressionError as exc:
            problems.append(f"{name}: {exc}")
    shown = {k: (int(v) if float(v).is_integer() else v) for k, v in parameters.items()}
    try:
        command = template.command.format(**shown)
    except (KeyError, IndexError, ValueError):
        command = template.command
    return replace(
        plan,
        parameters=dict(parameters),
        apply=apply,
        command=command_for(command, model=model, tp_size=budget.tp_size),
        problems=tuple(dict.fromkeys(problems)),
    )


def stabilise(
    result: Evaluation, stored: Mapping | None, playbook: Playbook, budget: b.Budget, *, model: str
) -> Evaluation:
    """The evaluation with every fix plan showing the settled parameters (where a cycle has
    settled them) and the deployment's command."""
    stored = stored or {}

    def visit(node: NodeResult) -> NodeResult:
        children = tuple(visit(child) for child in node.children)
        fix = node.fix
        if fix is not None:
            shown = (stored.get(node.key) or {}).get("shown") or {}
            parameters = {k: float(shown.get(k, v)) for k, v in fix.parameters.items()}
            template = playbook.node(node.key).fix
            if parameters == dict(fix.parameters) or template is None:
                fix = replace(
                    fix, command=command_for(fix.command, model=model, tp_size=budget.tp_size)
                )
            else:
                fix = replan(template, fix, parameters, budget, result.expected, model=model)
        return replace(node, children=children, fix=fix)

    return replace(result, nodes=tuple(visit(node) for node in result.nodes))


def changed_since_shown(current: Mapping[str, float], posted: Mapping[str, str]) -> str:
    """What differs between the parameters a form showed (``param.<name>`` fields) and
    the current ones, as text ("max_num_seqs 28 -> 25"); empty when they agree or the form
    carried none. Pure."""
    changes = []
    for name, value in current.items():
        sent = posted.get(f"param.{name}")
        if sent is None:
            continue
        try:
            same = float(sent) == float(value)
        except ValueError:
            same = False
        if not same:
            changes.append(f"{name} {sent} -> {value:g}")
    return ", ".join(changes)
