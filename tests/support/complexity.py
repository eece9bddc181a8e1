"""Complexity claims by counting work, never by reading a clock.

cProfile's call counts are exact and do not depend on how busy the machine is, so "four
times the input costs at most about four times the calls" is a deterministic way to say
"linear, not quadratic", and "rejected within N calls" a deterministic way to say "cheap
to refuse". Timings belong in ``bench/``, as ratios against a baseline of the same run.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class Count:
    calls: int = 0


@contextmanager
def counting() -> Iterator[Count]:
    """Count the Python function calls made inside the block, even when it raises."""
    count = Count()
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield count
    finally:
        profile.disable()
        count.calls = pstats.Stats(profile).total_calls


def calls(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """(number of function calls made, return value) of ``function(*args, **kwargs)``."""
    with counting() as count:
        result = function(*args, **kwargs)
    return count.calls, result
