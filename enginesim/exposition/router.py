"""Router metrics: `router_forward_duration_seconds`, summed over the replicas it forwards to."""

from __future__ import annotations

from collections.abc import Sequence

from enginesim.exposition.buckets import ROUTER_FORWARD
from enginesim.exposition.text import Writer
from enginesim.histogram import Histogram


def render(engines: Sequence, created_unix: float) -> str:
    h = Histogram(ROUTER_FORWARD)
    errors = 0
    total = 0
    for e in engines:
        rh = e.router.hist
        for i, c in enumerate(rh.counts):
            h.counts[i] += c
        h.sum += rh.sum
        h.count += rh.count
        errors += e.router.errors
        total += rh.count
    w = Writer(created=True)
    w.histogram(
        "router_forward_duration_seconds",
        "Time from request receipt at the router until it is forwarded to an engine, in seconds.",
        [((), h)],
        created_unix,
    )
    w.counter(
        "router_requests",
        "Requests handled by the router, by outcome.",
        [
            ((("status", "forwarded"),), total - errors),
            ((("status", "engine_unavailable"),), errors),
        ],
        created_unix,
    )
    return w.text()
