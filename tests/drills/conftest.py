"""A drill range on a real simulator (manual clock, 127.0.0.1, OS-assigned port)."""

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


class Simulator:
    def __init__(self) -> None:
        self.server = SimServer(SimDeployment("healthy", clock=SimClock("manual")))
        self.server.start_in_thread()
        self.base = f"http://127.0.0.1:{self.server.ports['main']}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.ports["main"], timeout=30)
        try:
            conn.request(method, path, body=json.dumps(body).encode() if body is not None else None)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def truth(self) -> dict:
        status, out = self.call("GET", "/control/truth")
        assert status == 200
        return out


@pytest.fixture
def simulator() -> Iterator[Simulator]:
    sim = Simulator()
    yield sim
    sim.server.stop()


@pytest.fixture
def drill_range(team, simulator) -> DrillRange:
    return register_drill_range(team, simulator.base)
