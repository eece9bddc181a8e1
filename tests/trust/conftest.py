"""Shared pieces of the trust tests: bounded, reproducible fuzzing settings and mutators
that start from the real captures in ``shared/samples``.

CI runs every fuzzer derandomized (the same examples on every run, no example database)
with a small ``max_examples`` so the whole fuzz set stays well under a minute. For a
long local hunt, set ``ATLAS_FUZZ_EXAMPLES`` (say 20000): each fuzzer then draws that many
examples from a random seed, and Hypothesis prints the seed and the shrunk input of any
failure (re-run it with ``--hypothesis-seed=<seed>``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, settings
from hypothesis import strategies as st

from tests.support.samples import samples_absent

LONG_RUN = os.environ.get("ATLAS_FUZZ_EXAMPLES", "").strip()


def fuzz_settings(examples: int) -> settings:
    """``examples`` in CI (derandomized); ``ATLAS_FUZZ_EXAMPLES`` of them, random, locally.

    No per-example deadline: a wall-clock limit fails a fast parser on a busy machine. A
    parser that hangs is caught by its own time bound (each has one, with its own test) and
    by the CI step's timeout; one that goes quadratic by the call-counting tests.
    """
    return settings(
        max_examples=int(LONG_RUN) if LONG_RUN else examples,
        deadline=None,
        derandomize=not LONG_RUN,
        database=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,
        ],
    )


def need_samples(paths: Sequence[Any]) -> None:
    """Skip (locally) or fail (CI) before drawing seeds that are not there."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        if samples_absent(paths[0].parent):
            pytest.skip(f"shared samples missing: {missing[0]}")
        pytest.fail(f"shared samples missing: {missing}")


@st.composite
def mutated(
    draw: st.DrawFn,
    seeds: Sequence[bytes],
    tokens: Sequence[bytes] = (),
    max_ops: int = 6,
) -> bytes:
    """A real capture with a few byte-level mutations: flips, interesting tokens,
    deleted / duplicated / spliced ranges, truncation. Shrinks towards the seed itself."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, max_ops))):
        op = draw(st.sampled_from(("flip", "insert", "token", "delete", "dup", "splice", "cut")))
        n = len(data)
        pos = draw(st.integers(0, n)) if n else 0
        if op == "flip" and n:
            at = min(pos, n - 1)
            data[at] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "token" and tokens:
            data[pos:pos] = draw(st.sampled_from(tokens))
        elif op == "delete" and n:
            data[pos : pos + draw(st.integers(1, 64))] = b""
        elif op == "dup" and n:
            piece = bytes(data[pos : pos + draw(st.integers(1, 256))])
            data[pos:pos] = piece * draw(st.integers(1, 4))
        elif op == "splice":
            other = draw(st.sampled_from(seeds))
            if other:
                start = draw(st.integers(0, len(other) - 1))
                data[pos:] = other[start : start + draw(st.integers(1, 4096))]
        elif op == "cut":
            del data[pos:]
    return bytes(data)


def json_values(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    """Any JSON value, hostile scalars included (huge ints, odd floats, control chars)."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.integers(min_value=-(1 << 70), max_value=1 << 70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=40)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def accepted_or_rejected(fn: Callable[[], Any], allowed: tuple[type[BaseException], ...]) -> Any:
    """Run ``fn``: its result, or None when it raised one of the documented rejections.

    Any other exception escapes, and Hypothesis shrinks the input that caused it."""
    try:
        result = fn()
    except allowed as exc:
        _event(f"rejected: {type(exc).__name__}")
        return None
    _event("accepted")
    return result


def seed_accepted(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on an unmutated seed: its result, and an assertion error for any exception.

    "Accepted or rejected" alone is passed by a parser that rejects everything, its seeds
    included (issue 19.14), so every fuzzer also runs its seeds through here and checks
    their values against an independent reading of the same input."""
    try:
        result = fn()
    except Exception as exc:
        raise AssertionError(f"an unmutated seed was rejected: {exc!r}") from exc
    assert result is not None, "an unmutated seed gave nothing"
    return result


def _event(name: str) -> None:
    """Counted in ``--hypothesis-show-statistics``: how many inputs got past the parser."""
    if currently_in_test_context():
        event(name)
