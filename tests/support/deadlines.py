"""A deadline that expires by count, not by clock (Django-free: the guard-mutant and
mutation runners import it without a settings module)."""

from __future__ import annotations

from artifacts.bounded import Deadline
from artifacts.errors import ArtifactRejected


class ExpiresAfter(Deadline):
    """Passes its first ``n`` checks and fails every later one: where a loop or a pass
    looks at the clock is counted, not timed."""

    def __init__(self, n: int) -> None:
        super().__init__(3600.0)
        self.left = n

    def check(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise ArtifactRejected(f"analysis exceeded its time limit of {self.seconds:g} s")
