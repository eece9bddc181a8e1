"""Who acts: a person, or automation named by what it is.

Actions take an ``Actor`` so an API token's decision is recorded under the token's name
(``API token ci``), not a generic "API token", and an auto-apply rule or an alert is
named as such. Django-free: the user is whatever the auth model is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

AUTOMATION = "automation"


@dataclass(frozen=True)
class Actor:
    """A person (``user`` set; ``name`` is their username) or automation (``user`` None;
    ``name`` says which: an API token, an alert, an automatic rule)."""

    user: Any = None
    name: str = AUTOMATION

    @classmethod
    def of(cls, who: Actor | Any | None, *, name: str = "") -> Actor:
        """An ``Actor`` from what callers hold: an Actor, a user, or None (automation,
        named ``name`` when given)."""
        if isinstance(who, Actor):
            return who
        if who is None:
            return cls(None, name or AUTOMATION)
        return cls(who, who.get_username())

    @classmethod
    def for_token(cls, token: Any) -> Actor:
        """A team's API token, named as the token list shows it."""
        return cls(None, f"API token {token.name}")

    @property
    def is_person(self) -> bool:
        return self.user is not None
