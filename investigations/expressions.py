"""A tiny arithmetic language for playbook thresholds and fix parameters.

Playbooks say ``budget.ttft_target_ms / 1000`` or ``1.25 * expected.prefill_ms``
instead of hard-coding numbers, so one playbook serves every deployment. The
text is data, so it is parsed with ``ast`` and evaluated by walking a whitelist:
numbers, names bound by the caller (``budget.x``, ``observed.y``), + - * / //,
unary minus, parentheses, and a few named functions. Anything else (attribute
access on values, subscripts, lambdas, comprehensions, keyword tricks) is
refused at load time, with the playbook path in the message.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# The namespaces a playbook may read: the deployment's constants, values measured
# during the investigation, expectations derived from the budget, and fix parameters.
SCOPES = frozenset({"budget", "observed", "expected", "baseline", "param"})
MAX_LENGTH = 300
MAX_NODES = 60

FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": round,
}
_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
}


class ExpressionError(ValueError):
    pass


class Missing(ExpressionError):
    """A name the expression needs has no value (e.g. nothing observed yet)."""


@dataclass(frozen=True)
class Expression:
    source: str
    tree: ast.expr
    names: frozenset[str]  # dotted names it reads, e.g. {"budget.ttft_target_ms"}

    def evaluate(
        self,
        scope: Mapping[str, float | None],
        functions: Mapping[str, Callable[..., float]] = FUNCTIONS,
    ) -> float:
        """Evaluate with dotted names from ``scope``; raises ``Missing`` when one is None
        or absent, so callers can say "inconclusive" rather than guess."""
        try:
            return float(_eval(self.tree, scope, functions))
        except OverflowError:
            # ceil(1e300) * ceil(1e300) is an int no float holds; the caller only knows
            # ExpressionError ("threshold not computable"), never a traceback.
            raise ExpressionError("the result is too large for a number") from None


def compile_expression(
    source: str | int | float, *, functions: Mapping[str, object] = FUNCTIONS
) -> Expression:
    """Parse and vet; the result can be evaluated any number of times."""
    if isinstance(source, bool):
        raise ExpressionError("a boolean is not a number")
    if isinstance(source, int | float):
        source = repr(source)
    if not isinstance(source, str) or not source.strip():
        raise ExpressionError("expected a number or an arithmetic expression")
    if len(source) > MAX_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"not an expression: {exc.msg}") from None
    names: set[str] = set()
    for count, node in enumerate(ast.walk(tree), start=1):
        if count > MAX_NODES:
            raise ExpressionError(f"expression has more than {MAX_NODES} parts")
        _vet(node, functions, names)
    return Expression(source.strip(), tree, frozenset(names))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _vet(node: ast.AST, functions: Mapping[str, object], names: set[str]) -> None:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ExpressionError(f"only numbers are allowed, not {node.value!r}")
    elif isinstance(node, ast.Attribute):
        dotted = _dotted(node)
        if (
            dotted is None
            or node.attr.startswith("_")
            or not isinstance(node.value, ast.Name)
            or node.value.id not in SCOPES
        ):
            scopes = ", ".join(sorted(SCOPES))
            raise ExpressionError(f"only names like budget.ttft_target_ms ({scopes}) are allowed")
        names.add(dotted)
    elif isinstance(node, ast.Name):
        # Bare names are function names only; values are always scoped (budget.x).
        if node.id not in functions and node.id not in SCOPES:
            raise ExpressionError(f"unknown name {node.id!r}: write budget.x or observed.x")
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in functions:
            allowed = ", ".join(sorted(functions))
            raise ExpressionError(f"only these functions may be called: {allowed}")
        if node.keywords:
            raise ExpressionError("functions take positional arguments only")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub | ast.UAdd):
            raise ExpressionError("only unary minus is allowed")
    elif not isinstance(node, ast.Load | ast.operator | ast.unaryop):
        raise ExpressionError(f"{type(node).__name__} is not allowed in an expression")


def _eval(node: ast.expr, scope: Mapping[str, float | None], functions: Mapping) -> float:
    if isinstance(node, ast.Constant):
        return node.value  # type: ignore[return-value]  # _vet admits numbers only
    if isinstance(node, ast.Attribute | ast.Name):
        dotted = _dotted(node)
        value = scope.get(dotted) if dotted else None
        if value is None:
            raise Missing(f"no value for {dotted}")
        return value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, scope, functions), _eval(node.right, scope, functions)
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExpressionError("division by zero") from None
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, scope, functions)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # _vet: names only
        args = [_eval(arg, scope, functions) for arg in node.args]
        try:
            return functions[node.func.id](*args)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise ExpressionError(f"{node.func.id}(...) failed: {exc}") from None
    raise ExpressionError(f"cannot evaluate {type(node).__name__}")
