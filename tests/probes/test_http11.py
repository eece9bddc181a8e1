"""The fan-out HTTP client's protocol handling, over real sockets."""

from __future__ import annotations

import asyncio

import pytest

from probes.http11 import HTTPError, Pool
from tests.support.hostile import hostile_server


async def _loopback(host: str, port: int) -> str:
    return "127.0.0.1"


def _get(
    base: str,
    paths: list[str],
    *,
    max_bytes: int = 1 << 20,
    connections: int = 4,
    timeout_s: float = 1.0,
):
    port = int(base.rsplit(":", 1)[1])

    async def run():
        async with Pool(
            _loopback,
            max_connections=connections,
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
        ) as pool:
            out = []
            for path in paths:  # sequential: exercises connection reuse
                try:
                    out.append(
                        await pool.get(
                            ("http", "127.0.0.1", port), path, max_bytes=max_bytes, headers={}
                        )
                    )
                except HTTPError as exc:
                    out.append(exc)
            return out

    return asyncio.run(run())


@pytest.fixture(scope="module")
def server():
    with hostile_server() as base:
        yield base


def test_gzip_bodies_are_decoded(server):
    (response,) = _get(server, ["/gzip"])
    assert response.body == b"# TYPE up gauge\nup 1\n" * 100


def test_chunked_bodies_are_joined(server):
    (response,) = _get(server, ["/chunked"])
    assert response.body == b"# TYPE up gauge\nup 1\n"


# Every answer but /hang arrives in full, so these run with timeouts no busy machine reaches:
# the kind then depends on the bytes alone (a 1 s read timeout once turned a gzip bomb into
# "timeout" under load). /hang never answers, so the deadline is its only possible outcome.
GENEROUS_S = 30.0


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/truncated-gzip", "protocol"),
        ("/header-bomb", "protocol"),
        ("/garbage", "protocol"),
        ("/gzip-bomb", "too-large"),
        ("/huge", "too-large"),
    ],
)
def test_bad_responses_are_classified(server, path, kind):
    (error,) = _get(server, [path], timeout_s=GENEROUS_S)
    assert isinstance(error, HTTPError) and error.kind == kind, error


def test_a_server_that_never_answers_is_a_timeout(server):
    (error,) = _get(server, ["/hang"])
    assert isinstance(error, HTTPError) and error.kind == "timeout", error


def test_an_endless_drip_of_chunks_stops_at_the_deadline(server):
    """Issue 19.1: endless 1-byte chunks keep data always waiting, so no read ever idles;
    the deadline must hold anyway (it ran 196 s past a 2 s deadline here before)."""
    port = int(server.rsplit(":", 1)[1])

    async def run():
        loop = asyncio.get_running_loop()
        async with Pool(_loopback, max_connections=1, connect_timeout=5, read_timeout=5) as pool:
            with pytest.raises(HTTPError) as caught:
                await pool.get(
                    ("http", "127.0.0.1", port),
                    "/drip-chunked",
                    max_bytes=64 << 20,
                    headers={},
                    deadline=loop.time() + 1.0,
                )
            return caught.value

    # Only the deadline can end an endless drip that is never idle with "timeout": the read
    # timeout (5 s) never fires, and the 64 MiB cap would say "too-large".
    error = asyncio.run(run())
    assert error.kind == "timeout", error


def test_chunk_framing_counts_against_a_wire_cap(server):
    """1-byte chunks cost 6 wire bytes per body byte: the wire cap stops them before the
    body cap would, and before any deadline."""
    (error,) = _get(server, ["/drip-chunked"], max_bytes=32 * 1024, timeout_s=GENEROUS_S)
    assert isinstance(error, HTTPError) and error.kind == "too-large", error
    assert "on the wire" in str(error)


def test_a_connection_closed_while_idle_is_replaced_transparently(server):
    responses = _get(server, ["/close-after"] * 5, connections=1)
    assert [r.body for r in responses] == [b"up 1\n"] * 5


def test_connections_are_reused_with_a_keep_alive_server():
    from enginesim.deployment import Deployment, SimClock
    from enginesim.server import SimServer

    sim = SimServer(Deployment("healthy", seed=0, clock=SimClock("manual"))).start_in_thread()
    try:
        base = f"http://127.0.0.1:{sim.ports['main']}"
        responses = _get(base, ["/metrics"] * 20, connections=1)
    finally:
        sim.stop()
    assert all(r.status == 200 and b"vllm:num_requests_running" in r.body for r in responses)
