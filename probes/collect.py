"""Fetch many HTTP targets at once, each within its own bounds.

One event loop and one bounded connection pool per batch: a worker polls
hundreds of endpoints per cycle concurrently, and one hung endpoint costs one
timeout, not the cycle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from probes import aio
from probes.net import FetchPolicy, FetchResult, ProbeError, afetch, guarded_async_client
from probes.promapi import QueryResult, instant_query


@dataclass(frozen=True)
class Fetched:
    key: str
    result: FetchResult | None
    error: ProbeError | None
    latency_s: float


async def _fetch_all(
    requests: Sequence[tuple[str, str]], policy: FetchPolicy, concurrency: int
) -> list[Fetched]:
    gate = asyncio.Semaphore(concurrency)
    async with guarded_async_client(policy, max_connections=concurrency) as client:

        async def one(key: str, url: str) -> Fetched:
            async with gate:
                started = time.monotonic()
                try:
                    result = await afetch(client, url, policy)
                except ProbeError as exc:
                    return Fetched(key, None, exc, time.monotonic() - started)
                return Fetched(key, result, None, time.monotonic() - started)

        return list(await asyncio.gather(*(one(key, url) for key, url in requests)))


def fetch_all(
    requests: Sequence[tuple[str, str]], policy: FetchPolicy, *, concurrency: int = 64
) -> list[Fetched]:
    """Fetch ``(key, url)`` pairs concurrently; results come back in request order."""
    if not requests:
        return []
    return aio.run(_fetch_all(requests, policy, concurrency))


@dataclass(frozen=True)
class Queried:
    key: str
    name: str
    result: QueryResult | None
    error: ProbeError | None
    latency_s: float


async def _query_all(
    jobs: Sequence[tuple[str, str, str, str]], policy: FetchPolicy, at: float, concurrency: int
) -> list[Queried]:
    gate = asyncio.Semaphore(concurrency)
    async with guarded_async_client(policy, max_connections=concurrency) as client:

        async def one(key: str, name: str, base: str, promql: str) -> Queried:
            async with gate:
                started = time.monotonic()
                try:
                    result = await instant_query(client, base, promql, policy, at=at)
                except ProbeError as exc:
                    return Queried(key, name, None, exc, time.monotonic() - started)
                return Queried(key, name, result, None, time.monotonic() - started)

        return list(await asyncio.gather(*(one(*job) for job in jobs)))


def query_all(
    jobs: Sequence[tuple[str, str, str, str]],
    policy: FetchPolicy,
    *,
    at: float,
    concurrency: int = 16,
) -> list[Queried]:
    """Evaluate ``(key, name, prometheus base URL, PromQL)`` jobs at ``at``, concurrently."""
    if not jobs:
        return []
    return aio.run(_query_all(jobs, policy, at, concurrency))
