"""A lean HTTP/1.1 GET client for fan-out polling: asyncio streams for I/O, h11 for the
protocol, a keep-alive pool per origin.

Why not httpx here: polling a thousand endpoints per cycle, httpcore's pool spends
O(requests x connections) time assigning requests and re-detects the async library on
every call; profiled at ~10 ms of CPU per request at 64-way concurrency. This client
does one thing (bounded GETs) and spends well under a millisecond per request.

Security lives where it did: every new connection goes to an address that
``connect`` (supplied by probes.net) resolved and checked; a response is read
with a header-size bound, a decoded-size cap, a wire-size cap, per-read timeouts and
the caller's overall deadline.

The deadline is checked by the read loop itself, against the clock, after every
event, rather than left to a cancellation: a peer that keeps data always waiting
(endless 1-byte chunks) gives a loop that never suspends, and on Python 3.11
``asyncio.wait_for`` swallows a cancellation that lands while its read completes,
so an outer ``asyncio.timeout`` never took effect (165 s past an 8 s deadline,
tests/probes/test_http11.py::test_an_endless_drip_of_chunks_stops_at_the_deadline).
The loop also yields to the event loop after every socket read, so one such peer
cannot starve the other targets of the batch.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import h11

Origin = tuple[str, str, int]  # (scheme, host, port)
Connector = Callable[[str, int], Awaitable[str]]  # (host, port) -> checked IP address
MAX_HEADER_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024
# Framing a server may add beyond the decoded body: chunk-size lines and trailers. An
# honest server's chunks are kilobytes, so twice the body is generous; 1-byte chunks cost
# 6 wire bytes per body byte and reach this cap long before the body cap.
WIRE_OVERHEAD_FACTOR = 2
USER_AGENT = "atlas-console-probe/1"


class HTTPError(Exception):
    """A failure with a stable ``kind`` (timeout, connect, protocol, too-large) for probes.net."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class RawResponse:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    protocol: h11.Connection

    def close(self) -> None:
        self.writer.close()


class Pool:
    """Keep-alive connections per origin, at most ``max_connections`` in use at once."""

    def __init__(
        self,
        connect: Connector,
        *,
        max_connections: int,
        connect_timeout: float,
        read_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._connect = connect
        self._gate = asyncio.Semaphore(max_connections)
        self._idle: dict[Origin, deque[_Connection]] = defaultdict(deque)
        self._max_idle = max_connections
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._ssl = ssl_context

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for connections in self._idle.values():
            while connections:
                connections.popleft().close()

    async def get(
        self,
        origin: Origin,
        target: str,
        *,
        max_bytes: int,
        headers: dict[str, str],
        deadline: float | None = None,
        method: str = "GET",
        body: bytes = b"",
    ) -> RawResponse:
        """GET ``target`` (path and query) from ``origin``; the body is decoded and capped.

        ``method``/``body`` send something else (chat webhooks POST one JSON body through
        the same guarded connections); a POST is never retried on a stale connection,
        since the server may have acted on it.

        ``deadline`` is an absolute ``loop.time()``: past it the exchange raises
        ``timeout`` whatever the peer is sending. probes.net always passes the fetch's own;
        without one the exchange still gets a bound (connect plus eight read timeouts), so
        no caller can make an unbounded read by omission.
        """
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.connect_timeout + 8 * self.read_timeout
        async with self._gate:
            connection = self._idle[origin].popleft() if self._idle[origin] else None
            reused = connection is not None
            if connection is None:
                connection = await self._open(origin, deadline)
            try:
                response = await self._exchange(
                    connection, origin, target, max_bytes, headers, deadline, method, body
                )
            except (HTTPError, OSError, EOFError, zlib.error) as exc:
                connection.close()
                stale = isinstance(exc, OSError | EOFError) or (
                    isinstance(exc, HTTPError) and exc.kind == "closed"
                )
                if not (reused and stale and method == "GET"):
                    raise _as_http_error(exc) from None
                # The server had closed this idle keep-alive connection: retry once, fresh.
                connection = await self._open(origin, deadline)
                try:
                    response = await self._exchange(
                        connection, origin, target, max_bytes, headers, deadline, method, body
                    )
                except (HTTPError, OSError, EOFError, zlib.error) as retry_exc:
                    connection.close()
                    raise _as_http_error(retry_exc) from None
                except BaseException:
                    connection.close()
                    raise
            except BaseException:
                connection.close()
                raise
            self._release(origin, connection)
            return response

    async def _open(self, origin: Origin, deadline: float) -> _Connection:
        scheme, host, port = origin
        address = await self._connect(host, port)
        context = None
        if scheme == "https":
            context = self._ssl or ssl.create_default_context()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(min(deadline, loop.time() + self.connect_timeout)):
                reader, writer = await asyncio.open_connection(
                    address,
                    port,
                    ssl=context,
                    server_hostname=host if context else None,
                    limit=READ_CHUNK,
                )
        except TimeoutError:
            raise HTTPError("timeout", f"no connection to {host}:{port} in time") from None
        except ssl.SSLError as exc:
            raise HTTPError("tls", f"TLS with {host}:{port} failed: {exc.reason}") from None
        except OSError as exc:
            raise HTTPError("connect", f"cannot connect to {host}:{port}: {exc}") from None
        protocol = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        return _Connection(reader, writer, protocol)

    def _release(self, origin: Origin, connection: _Connection) -> None:
        protocol = connection.protocol
        if protocol.our_state is h11.DONE and protocol.their_state is h11.DONE:
            protocol.start_next_cycle()
            if len(self._idle[origin]) < self._max_idle:
                self._idle[origin].append(connection)
                return
        connection.close()

    async def _exchange(
        self,
        connection: _Connection,
        origin: Origin,
        target: str,
        max_bytes: int,
        headers: dict[str, str],
        deadline: float,
        method: str = "GET",
        body: bytes = b"",
    ) -> RawResponse:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        max_wire = WIRE_OVERHEAD_FACTOR * max_bytes + MAX_HEADER_BYTES
        default_port = 443 if scheme == "https" else 80
        host_header = host if port == default_port else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            host_header = f"[{host}]" if port == default_port else f"[{host}]:{port}"
        protocol = connection.protocol
        framing = [("Content-Length", str(len(body)))] if method != "GET" else []
        request = h11.Request(
            method=method,
            target=target,
            headers=[
                ("Host", host_header),
                ("User-Agent", USER_AGENT),
                ("Accept-Encoding", "gzip"),
                *framing,
                *headers.items(),
            ],
        )
        wire = protocol.send(request)
        if body:
            wire += protocol.send(h11.Data(data=body))
        connection.writer.write(wire + protocol.send(h11.EndOfMessage()))
        await connection.writer.drain()

        status, reason, response_headers = 0, "", {}
        decoder = None
        parts: list[bytes] = []
        size = raw_size = wire_size = 0
        while True:
            # Checked per event, not per read: one 64 KiB read of 1-byte chunks is ~10,000
            # events, and the deadline must not depend on the peer ever going quiet.
            if loop.time() >= deadline:
                raise HTTPError("timeout", "no complete answer by the deadline")
            try:
                event = protocol.next_event()
            except h11.RemoteProtocolError as exc:
                raise HTTPError("protocol", f"malformed HTTP response: {exc}") from None
            if event is h11.NEED_DATA:
                try:
                    async with asyncio.timeout_at(min(deadline, loop.time() + self.read_timeout)):
                        chunk = await connection.reader.read(READ_CHUNK)
                except TimeoutError:
                    raise HTTPError("timeout", "no answer in time") from None
                if not chunk and protocol.their_state is h11.SEND_RESPONSE:
                    raise HTTPError("closed", "connection closed before a response")
                wire_size += len(chunk)
                if wire_size > max_wire:
                    raise HTTPError("too-large", f"response exceeds {max_wire:,} bytes on the wire")
                protocol.receive_data(chunk)
                # A read of buffered data returns without suspending: yield once per read
                # so the batch's other targets are served while this one streams.
                await asyncio.sleep(0)
                continue
            if isinstance(event, h11.Response):
                status, reason = event.status_code, event.reason.decode("latin-1")
                response_headers = {
                    k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers
                }
                encoding = response_headers.get("content-encoding", "identity").lower()
                if encoding == "gzip":
                    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
                elif encoding not in ("identity", ""):
                    raise HTTPError("protocol", f"unsupported content-encoding {encoding!r}")
            elif isinstance(event, h11.InformationalResponse):
                continue
            elif isinstance(event, h11.Data):
                data = bytes(event.data)
                raw_size += len(data)
                if decoder is not None:
                    # Decompress at most one byte past the cap: a bomb stops here.
                    data = decoder.decompress(data, max_bytes - size + 1)
                    if decoder.unconsumed_tail:
                        raise _too_large(max_bytes)
                size += len(data)
                if size > max_bytes or raw_size > max_bytes:
                    raise _too_large(max_bytes)
                parts.append(data)
            elif isinstance(event, h11.EndOfMessage):
                if decoder is not None:
                    tail = decoder.flush()
                    size += len(tail)
                    if size > max_bytes:
                        raise _too_large(max_bytes)
                    parts.append(tail)
                    if not decoder.eof:
                        raise HTTPError("protocol", "truncated gzip body")
                return RawResponse(status, reason, response_headers, b"".join(parts))
            elif isinstance(event, h11.ConnectionClosed):
                raise HTTPError("protocol", "connection closed mid-response")


def _too_large(max_bytes: int) -> HTTPError:
    return HTTPError("too-large", f"response exceeds {max_bytes:,} bytes (decoded)")


def _as_http_error(exc: BaseException) -> HTTPError:
    if isinstance(exc, HTTPError):
        if exc.kind == "closed":
            return HTTPError("protocol", str(exc))
        return exc
    if isinstance(exc, zlib.error):
        return HTTPError("protocol", f"bad gzip body: {exc}")
    return HTTPError("connect", f"connection failed: {exc}")
