"""Playbook arithmetic is data: only numbers, scoped names and a few functions run."""

from __future__ import annotations

import pytest

from investigations.expressions import ExpressionError, Missing, compile_expression

SCOPE = {"budget.ttft_target_ms": 600.0, "budget.decode_step_ms": 45.0, "observed.p95": None}


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("budget.ttft_target_ms / 1000", 0.6),
        ("1.25 * (budget.decode_step_ms + 18)", 78.75),
        ("max(budget.decode_step_ms, 50) - -1", 51.0),
        (0.9, 0.9),
        ("floor(7 / 2)", 3.0),
    ],
)
def test_it_evaluates_arithmetic_over_the_budget(source, value):
    assert compile_expression(source).evaluate(SCOPE) == pytest.approx(value)


def test_it_names_what_it_reads():
    assert compile_expression("budget.ttft_target_ms / 1000").names == {"budget.ttft_target_ms"}


def test_a_missing_value_is_missing_not_zero():
    with pytest.raises(Missing):
        compile_expression("observed.p95 * 2").evaluate(SCOPE)
    with pytest.raises(Missing):
        compile_expression("budget.nonexistent").evaluate(SCOPE)


@pytest.mark.parametrize(
    "source",
    [
        "__import__('os').system('id')",
        "budget.__class__",
        "().__class__.__bases__[0]",
        "[x for x in range(10)]",
        "lambda: 1",
        "open('/etc/passwd')",
        "budget['x']",
        "a.b.c",
        "x",
        "1 if budget.x else 2",
        "2 ** 1000000",
        "'text'",
        "True",
        "min(key=1)",
        "1 < 2",
        "",
        "1" * 400,
        "+".join(["1"] * 80),
    ],
)
def test_anything_else_is_refused_at_compile_time(source):
    with pytest.raises(ExpressionError):
        compile_expression(source)


def test_division_by_zero_is_an_error_not_infinity():
    with pytest.raises(ExpressionError, match="division by zero"):
        compile_expression("budget.ttft_target_ms / (budget.decode_step_ms - 45)").evaluate(SCOPE)
