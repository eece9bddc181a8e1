"""A hypothesis's state as its decisions leave it: the latest decision wins.

Below ``actions`` and ``live`` both, so the live state (which the close action freezes)
reads decisions without importing the actions that write them."""

from __future__ import annotations

from investigations.choices import STATE_AFTER, NodeState
from investigations.models import Investigation

__all__ = ["STATE_AFTER", "node_states"]


def node_states(investigation: Investigation) -> dict[str, NodeState]:
    """Each decided node's current state: the latest decision wins."""
    states: dict[str, NodeState] = {}
    for node, action in investigation.decisions.order_by("sequence").values_list("node", "action"):
        states[node] = STATE_AFTER[action]
    return states
