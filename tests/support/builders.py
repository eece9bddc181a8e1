"""Rows the tests build again and again: a deployment, its targets, their observations.

Why one module: about forty test files each wrote ``Deployment.objects.create(...)`` and
their own ``deployment`` fixture, so a new required field or a moved model meant forty
edits. Here a deployment takes its budget from the model's defaults, which come from
``deployments.budget.Budget`` (the one place those numbers are written); a test names
only what it is about (``tp_size=8``), never the rest.

In a pytest test, ask for the ``make_deployment`` / ``deployment`` fixtures of
``tests/conftest.py`` (they bind ``team``); scripts, ``TestCase`` classes and fixtures
that already hold a team call these functions: ``builders.deployment(team, "atlas-sim")``.
Django is imported inside each function, so importing this module needs no set-up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deployments.models import Deployment
    from probes.models import Observation, Target
    from teams.models import Team

# Where the engine simulator (enginesim) serves each kind: ``targets(deployment, base)``.
SIMULATOR_PATHS = {"engine": "/metrics", "dcgm": "/dcgm/metrics", "log_http": "/logs"}

# A reachable-looking address nothing is asked of (tests that never poll).
UNPOLLED_URL = "http://10.0.0.5/metrics"


def deployment(team: Team, name: str = "atlas-prod", **fields: Any) -> Deployment:
    """One deployment of ``team``; fields not given keep the model's (the budget's) defaults."""
    from deployments.models import Deployment

    return Deployment.objects.create(team=team, name=name, **fields)


def target(
    deployment: Deployment, kind: str = "engine", url: str = UNPOLLED_URL, **fields: Any
) -> Target:
    """One probe target of ``deployment`` (an engine ``/metrics`` unless told otherwise)."""
    from probes.models import Target

    return Target.objects.create(deployment=deployment, kind=kind, url=url, **fields)


def targets(
    deployment: Deployment, base: str, kinds: Iterable[str] = ("engine", "dcgm"), **fields: Any
) -> list[Target]:
    """The targets a simulator at ``base`` serves, one per kind, at enginesim's paths."""
    return [target(deployment, kind, base + SIMULATOR_PATHS[kind], **fields) for kind in kinds]


def observations(
    target: Target,
    values: Mapping[str, float],
    *,
    at: datetime,
    count: int = 1,
    step_s: float = 15.0,
    labels: str = "",
) -> list[Observation]:
    """``count`` readings of each signal in ``values``, one every ``step_s`` back from ``at``.

    A steady series: the shape most evaluation and page tests need ("KV cache at 0.94 for
    the last ten cycles"). Tests about the shape of a series build their own rows."""
    from probes.models import Observation

    return Observation.objects.bulk_create(
        Observation(
            target=target,
            taken_at=at - timedelta(seconds=step_s * n),
            signal=signal,
            labels=labels,
            value=value,
        )
        for n in range(count)
        for signal, value in values.items()
    )
