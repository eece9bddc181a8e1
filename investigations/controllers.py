"""Engine controllers: how "Apply fix" changes a deployment Atlas runs itself.

A deployment with an ``EngineController`` row (the demo's simulator, a drill range) is one
Atlas may change: "Apply fix" sends the fix's ``apply`` settings to the engine's control
endpoint, and only a change the engine accepted is recorded and written on the timeline.
A deployment without one is production: the commander applies the fix and records it,
and Atlas changes nothing. One implementation per ``ControllerKind`` (a table, like
realengine.controller's settings table for the real vLLM, which it restarts).

The request goes through the probes' network guard (probes.control) and is made outside
any database transaction: the action records the fix only after the engine answered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings

from deployments.models import ControllerKind, Deployment, EngineController
from enginesim.config import FIX_FIELDS
from investigations import actions
from investigations.evaluation import FixPlan
from investigations.models import FixRecord, Investigation
from probes import control
from probes.policy import fetch_policy

CLOCK_BUDGET_S = 2.0


class ControllerError(Exception):
    """The engine did not take the fix; nothing was recorded. The message is for people."""


@dataclass(frozen=True)
class Applied:
    """What the controller sent and what the engine said, for the timeline."""

    kind: str
    url: str
    sent: dict[str, Any]
    answer: dict[str, Any]

    @property
    def summary(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.sent.items())
        return f"through {self.kind} at {self.url} ({shown})"


class Controller(Protocol):
    def apply(self, url: str, settings_: Mapping[str, float]) -> Applied: ...

    def clock(self, url: str) -> dict[str, Any]: ...


def _enginesim_bool(value: float) -> bool:
    if value not in (0, 1):
        raise ControllerError(f"{value!r} is not a yes/no setting (0 or 1)")
    return bool(value)


def _enginesim_int(value: float) -> int:
    if int(value) != value:
        raise ControllerError(f"{value!r} is not a whole number")
    return int(value)


# enginesim's fix fields by the type its /control/fix accepts (enginesim.config.FIX_FIELDS),
# plus the keys it handles outside the engine config.
_CONVERT: dict[type, Callable[[float], Any]] = {
    bool: _enginesim_bool,
    int: _enginesim_int,
    float: float,
}
ENGINESIM_SETTINGS: dict[str, Callable[[float], Any]] = {
    **{name: _CONVERT[typ] for name, (typ, _) in FIX_FIELDS.items() if typ in _CONVERT},
    "clear_straggler": _enginesim_bool,
    "router_extra_delay_s": float,
}


def enginesim_changes(apply: Mapping[str, float]) -> dict[str, Any]:
    """A fix's ``apply`` settings as enginesim's /control/fix body; pure. Refuses a
    setting the simulator does not know rather than applying the fix with it dropped."""
    if not apply:
        raise ControllerError("this fix names no engine setting to apply")
    out = {}
    for name, value in apply.items():
        convert = ENGINESIM_SETTINGS.get(name)
        if convert is None:
            raise ControllerError(f"the simulator cannot apply {name!r}")
        out[name] = convert(value)
    return out


class EnginesimController:
    """enginesim's control endpoints, with the console's control token."""

    kind = ControllerKind.ENGINESIM

    def _call(self, method: str, url: str, path: str, payload=None, budget_s=None) -> Any:
        try:
            return control.call(
                method,
                url,
                path,
                fetch_policy(budget_s=budget_s),
                payload=payload,
                token=settings.ATLAS_SIM_CONTROL_TOKEN,
            )
        except control.ControlError as exc:
            raise ControllerError(str(exc)) from None

    def apply(self, url: str, settings_: Mapping[str, float]) -> Applied:
        changes = enginesim_changes(settings_)
        answer = self._call("POST", url, "/control/fix", changes)
        if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
            raise ControllerError("the simulator did not confirm the fix")
        return Applied(str(self.kind), url, changes, {"sim_time_s": answer.get("sim_time_s")})

    def clock(self, url: str) -> dict[str, Any]:
        # Read on every refresh of a page: a short deadline, so a stuck simulator costs
        # the panel, not the page.
        answer = self._call("GET", url, "/control/clock", budget_s=CLOCK_BUDGET_S)
        if not isinstance(answer, dict):
            raise ControllerError("the simulator's clock is not a JSON object")
        return answer


CONTROLLERS: dict[str, Controller] = {ControllerKind.ENGINESIM: EnginesimController()}


def controller_of(deployment: Deployment) -> EngineController | None:
    """The deployment's controller row, or None: production (Atlas changes nothing). The
    access helpers select it with the deployment, so pages pay no query for it."""
    try:
        return deployment.controller
    except EngineController.DoesNotExist:
        return None


def apply_fix(row: EngineController, apply: Mapping[str, float]) -> Applied:
    """Send the fix to the engine; raises ControllerError when it did not take it."""
    return CONTROLLERS[row.kind].apply(row.url, apply)


def clock(row: EngineController) -> dict[str, Any] | None:
    """The simulator's incident clock when the team may see it (the demo), else None."""
    if not row.shows_clock:
        return None
    return CONTROLLERS[row.kind].clock(row.url)


def apply_and_record(
    *, investigation: Investigation, node: str, plan: FixPlan, user, note: str = ""
) -> tuple[FixRecord, Applied | None]:
    """ "Apply fix": on a deployment Atlas runs, send the fix to its engine first (outside
    any transaction) and record it only once the engine took it, with the controller on
    the timeline; on production, record what the commander applied. Raises ValueError
    (cannot be recorded now) or ControllerError (the engine did not take it); either way
    nothing is recorded."""
    refusal = actions.fix_refusal(investigation, node)
    if refusal:
        raise ValueError(refusal)
    row = controller_of(investigation.deployment)
    applied = apply_fix(row, plan.apply) if row is not None else None
    fix = actions.record_fix(
        investigation=investigation,
        node=node,
        parameters=dict(plan.parameters),
        user=user,
        note=note,
        applied_through=applied.summary if applied else "",
    )
    return fix, applied


@dataclass(frozen=True)
class ClockView:
    """The demo's incident clock as the page shows it."""

    live: bool
    headline: str
    detail: str


def _duration(sim_s: float, speed: float | None) -> str:
    wall = max(0.0, sim_s / (speed or 1.0))
    minutes, seconds = divmod(round(wall), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def describe_clock(report: Mapping[str, Any]) -> ClockView:
    """Words for a simulator's /control/clock answer; pure. Durations are wall time (the
    simulator's seconds divided by its speed), which is what a person waits."""
    speed = report.get("speed")
    loop_s = report.get("loop_s")
    where = (
        f"loop {report.get('loop')}, {_duration(report.get('phase_s') or 0, speed)} into a "
        f"{_duration(loop_s, speed)} cycle"
        if loop_s
        else f"{_duration(report.get('sim_time_s') or 0, speed)} since the simulator started"
    )
    if report.get("incident_in_progress"):
        ends = report.get("incident_ends_in_s")
        tail = f" for about {_duration(ends, speed)} more" if ends is not None else ""
        return ClockView(True, f"Incident in progress{tail}", where)
    starts = report.get("incident_starts_in_s")
    if starts is None:
        return ClockView(False, "No incident to come", where)
    return ClockView(False, f"Quiet: the next incident starts in {_duration(starts, speed)}", where)
