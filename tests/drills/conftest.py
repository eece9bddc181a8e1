"""A drill range on a real simulator (manual clock, 127.0.0.1, OS-assigned port) that, as
``./atlas demo`` runs it, answers /control/ only with the console's control token."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from atlas_console.management.commands.bootstrap_demo import register_drill_range
from drills.models import DrillRange
from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer

CONTROL_TOKEN = "drill-range-control-token"


class Simulator:
    def __init__(self) -> None:
        self.server = SimServer(
            SimDeployment("healthy", clock=SimClock("manual")), control_token=CONTROL_TOKEN
        )
        self.server.start_in_thread()
        self.base = f"http://127.0.0.1:{self.server.ports['main']}"

    def call(
        self, method: str, path: str, body: Any = None, *, token: str | None = CONTROL_TOKEN
    ) -> tuple[int, Any]:
        """A request as the console makes it (with the token) or, ``token=None``, as anyone
        else who can reach the range (a trainee) does."""
        conn = http.client.HTTPConnection("127.0.0.1", self.server.ports["main"], timeout=30)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            conn.request(
                method,
                path,
                body=json.dumps(body).encode() if body is not None else None,
                headers=headers,
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def truth(self) -> dict:
        status, out = self.call("GET", "/control/truth")
        assert status == 200
        return out


@pytest.fixture
def simulator(settings) -> Iterator[Simulator]:
    settings.ATLAS_SIM_CONTROL_TOKEN = CONTROL_TOKEN
    sim = Simulator()
    yield sim
    sim.server.stop()


@pytest.fixture
def drill_range(team, simulator) -> DrillRange:
    return register_drill_range(team, simulator.base)
