"""Playbook expressions under a fuzzer: grammar-shaped and arbitrary text, hostile scopes.

Property: ``compile_expression`` returns an ``Expression`` or raises ``ExpressionError``;
``evaluate`` returns a float or raises ``ExpressionError`` (``Missing`` included). The
evaluation code catches exactly that type to say "threshold not computable"; anything
else would be a traceback on every investigation page that reads the playbook.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from deployments.budget import Budget
from investigations.evaluation import playbook_functions
from investigations.expressions import FUNCTIONS, ExpressionError, compile_expression
from tests.trust.conftest import accepted_or_rejected, fuzz_settings, seed_accepted

NAMES = ("budget.ttft_target_ms", "observed.itl_p99_ms", "expected.prefill_ms", "param.chunk")
ATOMS = st.sampled_from(
    [*NAMES, "0", "1", "0.0", "-0.0", "1e300", "1e-300", "1e999", "9" * 40, "3", "0.5",
     "budget.__class__", "budget", "observed.x.y", "__import__('os')", "True", "None", "'a'",
     "budget._secret", "[1]", "{}", "lambda: 1", "x if 1 else 2", "nan", "inf"]
)  # fmt: skip
OPS = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "@", "<", " and ", "|", "<<"])
CALLS = st.sampled_from([*FUNCTIONS, "seqs_for_occupancy", "chunk_for_ceiling", "eval", "min"])


def _expressions() -> st.SearchStrategy[str]:
    return st.recursive(
        ATOMS,
        lambda inner: st.one_of(
            st.tuples(inner, OPS, inner).map("".join),
            inner.map(lambda e: f"({e})"),
            inner.map(lambda e: f"-{e}"),
            st.tuples(CALLS, st.lists(inner, max_size=3)).map(
                lambda c: f"{c[0]}({', '.join(c[1])})"
            ),
        ),
        max_leaves=12,
    )


SCOPE_VALUES = st.none() | st.floats() | st.integers(min_value=-(1 << 64), max_value=1 << 64)


# Unmutated inputs and their values: each fuzzer's own seeds must evaluate to exactly
# these, or a compiler that refused everything would pass "compiled or refused".
SEEDS = {
    "budget.ttft_target_ms + observed.itl_p99_ms * 2": 5.0,  # with SEED_VALUES below
    "max(expected.prefill_ms, param.chunk) / 2": 2.0,
    "1 + 2": 3.0,
    "ceil(2.5) - floor(2.5)": 1.0,
}
SEED_VALUES = [1.0, 2.0, 3.0, 4.0]


def _seed(source: object, scope: dict) -> None:
    functions = playbook_functions(Budget())
    compiled = seed_accepted(lambda: compile_expression(source, functions=functions))
    assert seed_accepted(lambda: compiled.evaluate(scope, functions)) == SEEDS[source]


def _check(source: object, scope: dict) -> None:
    if source in SEEDS and (not scope or list(scope.values()) == SEED_VALUES):
        _seed(source, scope)
    functions = playbook_functions(Budget())  # what evaluation.py evaluates playbooks with
    compiled = accepted_or_rejected(
        lambda: compile_expression(source, functions=functions), (ExpressionError,)
    )
    if compiled is None:
        return
    value = accepted_or_rejected(lambda: compiled.evaluate(scope, functions), (ExpressionError,))
    assert value is None or isinstance(value, float)


@fuzz_settings(300)
@given(source=_expressions(), values=st.lists(SCOPE_VALUES, min_size=4, max_size=4))
@example(source="ceil(1e300) * ceil(1e300)", values=[1.0] * 4)
@example(source="ceil(1e300) * ceil(1e300) / 1", values=[1.0] * 4)
@example(source="budget.ttft_target_ms + observed.itl_p99_ms * 2", values=SEED_VALUES)
@example(source="max(expected.prefill_ms, param.chunk) / 2", values=SEED_VALUES)
def test_grammar_shaped_expressions_compile_and_evaluate_or_are_refused(source, values):
    _check(source, dict(zip(NAMES, values, strict=True)))


@fuzz_settings(200)
@given(source=st.text(max_size=320) | st.integers() | st.floats() | st.booleans() | st.none())
@example(source="1\x00")
@example(source="(" * 250 + "1" + ")" * 250)
@example(source="-" * 299 + "1")
@example(source="1 + 2")
@example(source="ceil(2.5) - floor(2.5)")
def test_arbitrary_text_compiles_or_is_refused(source):
    _check(source, {})


@pytest.mark.parametrize(
    "source", ["ceil(1e300) * ceil(1e300)", "ceil(1e300) * ceil(1e300) / 1", "floor(-1e300) ** 1"]
)
def test_a_result_no_float_can_hold_is_an_expression_error(source):
    """Found by the fuzzer: an int past float range escaped as OverflowError."""
    try:
        compiled = compile_expression(source)
    except ExpressionError:
        return  # "**" is refused at compile time
    with pytest.raises(ExpressionError, match="too large"):
        compiled.evaluate({})


def test_playbook_functions_with_hostile_arguments_raise_only_expression_errors():
    """The budget helpers run inside evaluate(): their failures must come out as
    ExpressionError too, whatever numbers a deployment's constants hold."""
    functions = playbook_functions(Budget())
    for args in ("0, 0", "-1, 1e300", "1e999, 0.5", "0.0, -0.0", "1, 1e-300"):
        compiled = compile_expression(f"seqs_for_occupancy({args})", functions=functions)
        accepted_or_rejected(lambda c=compiled: c.evaluate({}, functions), (ExpressionError,))
    for arg in ("0", "-1", "1e999", "1e-300"):
        compiled = compile_expression(f"chunk_for_ceiling({arg})", functions=functions)
        accepted_or_rejected(lambda c=compiled: c.evaluate({}, functions), (ExpressionError,))
    assert not math.isnan(compile_expression("1").evaluate({}, functions))
