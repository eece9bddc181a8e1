"""Closing as if the fix's verification had come out a given way.

The close action judges verification itself (no caller hands it a state); tests about
what a close records (audit entries, search documents, overrides) rather than about
verification (tests/investigations/test_verification.py) fix the outcome here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def verification_as(state: str) -> Iterator[None]:
    from investigations import frozen

    def judged(result):
        return {
            "state": state,
            "elapsed_s": 0.0,
            "window_s": 0,
            "criteria": [],
            "side_effects": [],
        }

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frozen, "verification_facts", judged)
        yield
