"""Helpers for enginesim tests: an in-process server on an OS-assigned port, real HTTP only.

No Django, no database: these tests run under plain pytest and under pytest-django alike.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from enginesim.deployment import Deployment, SimClock  # noqa: E402
from enginesim.server import SimServer  # noqa: E402
from probes.parsing.windowed import bucket_quantile  # noqa: E402


class Harness:
    """A manual-clock deployment served over HTTP on 127.0.0.1:<free port>."""

    def __init__(
        self,
        scenario: str = "healthy",
        *,
        replicas: int = 1,
        fmt: str = "vllm-v1",
        seed: int | None = None,
        params: dict[str, float] | None = None,
        per_replica_ports: bool = False,
        router_port: int | None = None,
        clock: SimClock | None = None,
        simulated: int | None = None,
    ) -> None:
        self.d = Deployment(
            scenario,
            replicas=replicas,
            fmt=fmt,
            # Tests run on seed 0; ENGINESIM_TEST_SEED re-runs them on another stream.
            seed=int(os.environ.get("ENGINESIM_TEST_SEED", "0")) if seed is None else seed,
            params=params,
            clock=clock or SimClock("manual"),
            simulated=simulated,
        )
        self.srv = SimServer(
            self.d, per_replica_ports=per_replica_ports, router_port=router_port
        ).start_in_thread()
        self.port = self.srv.ports["main"]

    def request(
        self, method: str, path: str, body: bytes | None = None, port: int | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=60)
        try:
            conn.request(method, path, body=body)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def get(self, path: str, port: int | None = None) -> bytes:
        status, _, data = self.request("GET", path, port=port)
        assert status == 200, (path, status, data[:200])
        return data

    def post_json(self, path: str, obj: Any) -> tuple[int, Any]:
        status, _, data = self.request("POST", path, json.dumps(obj).encode())
        return status, json.loads(data)

    def advance(self, seconds: float) -> float:
        status, _, data = self.request("POST", f"/control/advance?seconds={seconds}", b"")
        assert status == 200, data
        return json.loads(data)["sim_time_s"]

    def advance_to(self, t: float) -> None:
        now = self.d.now()
        if t > now:
            self.advance(t - now)

    def fix(self, changes: dict[str, Any] | None = None) -> Any:
        status, out = self.post_json("/control/fix", changes or self.d.scenario.fix)
        assert status == 200, out
        return out

    def scrape(self, path: str = "/metrics") -> Scrape:
        return Scrape(self.get(path).decode())

    def close(self) -> None:
        self.srv.stop()


class Scrape:
    """Parsed exposition: samples by name, plus helpers for gauges and histograms."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for fam in self.families.values():
            for s in fam.samples:
                self.samples.setdefault(s.name, []).append((s.labels, s.value))

    def value(self, name: str, **labels: str) -> float:
        vals = [v for ls, v in self.samples.get(name, []) if labels.items() <= ls.items()]
        assert vals, f"no sample {name} {labels}"
        return sum(vals)

    def buckets(self, name: str, **labels: str) -> list[tuple[float, float]]:
        out: dict[float, float] = {}
        for ls, v in self.samples.get(f"{name}_bucket", []):
            if {k: x for k, x in ls.items() if k != "le"}.items() >= labels.items():
                le = float(ls["le"])
                out[le] = out.get(le, 0.0) + v
        return sorted(out.items())


def window_quantile(q: float, before: Scrape | None, after: Scrape, name: str) -> float:
    """histogram_quantile(q, increase(name_bucket[window])), with the product's own
    Prometheus-exact bucket arithmetic (probes.parsing.windowed)."""
    b1 = after.buckets(name)
    b0 = dict(before.buckets(name)) if before is not None else {}
    deltas = [(le, c - b0.get(le, 0.0)) for le, c in b1]
    if any(d < 0 for _, d in deltas):  # counter reset (restart): use the new process only
        deltas = b1
    return bucket_quantile(q, deltas)


@pytest.fixture
def harness() -> Iterator[Any]:
    made: list[Harness] = []

    def make(*args: Any, **kwargs: Any) -> Harness:
        h = Harness(*args, **kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


Harness.window_quantile = staticmethod(window_quantile)  # type: ignore[attr-defined]
Harness.Scrape = Scrape  # type: ignore[attr-defined]
