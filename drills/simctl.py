"""Telling a drill range's simulator which incident to run: one guarded, bounded POST.

The simulator URL is typed in by people, so it gets the probes' treatment: the host is
resolved once, every answer is checked against ATLAS_PROBE_ALLOWED_NETWORKS and the
always-blocked ranges (probes.net), and the request goes to the checked address. The
answer is read under a byte cap and an overall deadline.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from probes import control
from probes.control import MAX_ANSWER_BYTES
from probes.net import FetchPolicy

__all__ = ["MAX_ANSWER_BYTES", "SimulatorError", "switch_scenario"]


class SimulatorError(Exception):
    """The range's simulator could not be switched; the message says why, for people."""


def switch_scenario(base_url: str, scenario: str, seed: int, policy: FetchPolicy) -> dict[str, Any]:
    """POST /control/scenario (with the console's control token) and return the
    simulator's ground truth for the new run."""
    try:
        truth = control.call(
            "POST",
            base_url,
            "/control/scenario",
            policy,
            payload={"scenario": scenario, "seed": seed},
            token=settings.ATLAS_SIM_CONTROL_TOKEN,
        )
    except control.ControlError as exc:
        if exc.status is not None:
            raise SimulatorError(
                f"the simulator refused the switch (HTTP {exc.status}): {exc.detail}"
            ) from None
        raise SimulatorError(str(exc)) from None
    if not isinstance(truth, dict):
        raise SimulatorError("the simulator's answer is not a JSON object")
    causes = truth.get("causes")
    if truth.get("scenario") != scenario or not (
        isinstance(causes, list) and all(isinstance(c, str) and len(c) <= 64 for c in causes)
    ):
        raise SimulatorError("the simulator did not confirm the scenario switch")
    return truth
