"""HTTP front end: stdlib asyncio, one event loop, any number of listening ports.

One port serves every replica under `/replicas/{i}/...` (replica 0 also at the root); optionally
each replica gets its own port too. Requests are bounded (head 16 KiB, body 64 KiB), HTTP/1.1
keep-alive is supported (Prometheus reuses connections), and the server binds 127.0.0.1 only.

The simulation never advances on a timer thread racing the handlers: the loop's single thread
advances a replica to the clock's time right before answering for it, and a background task keeps
every replica moving (in realtime mode) so logs and counters progress without scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from enginesim import scenarios
from enginesim.config import ConfigError
from enginesim.deployment import Deployment
from enginesim.exposition import dcgm, router

MAX_HEAD = 16 * 1024
MAX_BODY = 64 * 1024
MAX_SCENARIO_BODY = 1024
IDLE_TIMEOUT_S = 120.0  # keep-alive connections idle longer than this are closed
BODY_TIMEOUT_S = 30.0
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
REASONS = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def _json(obj: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(obj, sort_keys=True).encode() + b"\n")


def _text(s: str | bytes, status: int = 200, ctype: str = "text/plain; charset=utf-8") -> Response:
    return Response(status, s.encode() if isinstance(s, str) else s, ctype)


class SimServer:
    def __init__(
        self,
        deployment: Deployment,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        per_replica_ports: bool = False,
        replica_base_port: int = 0,
        router_port: int | None = None,
        tick_s: float = 0.2,
        control_token: str | None = None,
    ) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the simulator binds loopback only")
        self.d = deployment
        self.host = host
        self.port = port
        self.per_replica_ports = per_replica_ports
        self.replica_base_port = replica_base_port
        self.router_port = router_port
        self.tick_s = tick_s
        # With a token, every /control/ path (truth, clock, fix, scenario, advance) needs
        # "Authorization: Bearer <token>": a drill's trainee can read the range's URL off the
        # probe table, so the ground truth must not be one GET away. Engine endpoints stay
        # open, as a real engine's are.
        self.control_token = control_token or None
        self.ports: dict[str, int] = {}
        self.replica_ports: list[int] = []
        self._servers: list[asyncio.base_events.Server] = []
        self._cache: dict[tuple[int, str], tuple[int, bytes]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._stop = asyncio.Event()
        main = await asyncio.start_server(
            lambda r, w: self._conn(r, w, None), self.host, self.port, reuse_address=True
        )
        self._servers.append(main)
        self.ports["main"] = main.sockets[0].getsockname()[1]
        if self.per_replica_ports:
            for i in range(len(self.d.replicas)):
                p = self.replica_base_port + i if self.replica_base_port else 0
                srv = await asyncio.start_server(
                    functools.partial(self._conn, bound=i), self.host, p, reuse_address=True
                )
                self._servers.append(srv)
                self.replica_ports.append(srv.sockets[0].getsockname()[1])
        if self.router_port is not None:
            srv = await asyncio.start_server(
                lambda r, w: self._conn(r, w, "router"), self.host, self.router_port
            )
            self._servers.append(srv)
            self.ports["router"] = srv.sockets[0].getsockname()[1]
        if self.d.clock.mode == "realtime":
            self._ticker = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        assert self._stop is not None
        while not self._stop.is_set():
            self.d.sync()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.tick_s)

    async def close(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._ticker is not None:
            await self._ticker
        for srv in self._servers:
            srv.close()
        for w in list(self._writers):
            w.close()
        for srv in self._servers:
            await srv.wait_closed()
        self._servers.clear()

    async def serve_forever(self) -> None:
        await self.start()
        assert self._stop is not None
        await self._stop.wait()
        await self.close()

    def start_in_thread(self) -> SimServer:
        """Run the loop in a daemon thread (tests, benches); `stop()` joins it."""

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                self._error = exc
                self._started.set()
                loop.close()
                return
            self._started.set()
            assert self._stop is not None
            loop.run_until_complete(self._stop.wait())
            loop.run_until_complete(self.close())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="enginesim-http", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.ports['main']}"

    # ----------------------------------------------------------------- HTTP
    async def _conn(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bound: int | str | None
    ) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT_S)
                except asyncio.LimitOverrunError:
                    await self._send(writer, Response(431, b""), close=True)
                    return
                except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                    return
                if len(head) > MAX_HEAD:
                    await self._send(writer, Response(431, b""), close=True)
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, version = lines[0].split(" ", 2)
                except ValueError:
                    await self._send(writer, Response(400, b""), close=True)
                    return
                headers = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                try:
                    length = int(headers.get("content-length", "0"))
                except ValueError:
                    length = -1
                if length < 0 or length > MAX_BODY:
                    await self._send(writer, Response(413, b""), close=True)
                    return
                try:
                    body = (
                        await asyncio.wait_for(reader.readexactly(length), BODY_TIMEOUT_S)
                        if length
                        else b""
                    )
                except TimeoutError:
                    return
                try:
                    resp = await self._dispatch(method.upper(), target, body, bound, headers)
                except ConfigError as exc:
                    resp = _json({"error": str(exc)}, 400)
                close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
                await self._send(writer, resp, close=close, head_only=method.upper() == "HEAD")
                if close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _send(
        self, writer: asyncio.StreamWriter, r: Response, *, close: bool, head_only: bool = False
    ) -> None:
        hdr = [
            f"HTTP/1.1 {r.status} {REASONS.get(r.status, 'Status')}",
            f"Content-Type: {r.content_type}",
            f"Content-Length: {len(r.body)}",
            "Connection: close" if close else "Connection: keep-alive",
            *(f"{k}: {v}" for k, v in r.headers),
        ]
        writer.write(("\r\n".join(hdr) + "\r\n\r\n").encode("latin-1"))
        if not head_only:
            writer.write(r.body)
        await writer.drain()

    # -------------------------------------------------------------- routing
    async def _dispatch(
        self,
        method: str,
        target: str,
        body: bytes,
        bound: int | str | None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        parts = urlsplit(target)
        path = parts.path.rstrip("/") or "/"
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if bound == "router":
            if path in ("/metrics", "/router/metrics"):
                return self._router_metrics()
            return _json({"error": "not found"}, 404)
        replica: int | None = bound if isinstance(bound, int) else None
        explicit = replica is not None
        if path.startswith("/replicas/"):
            seg = path.split("/", 3)
            try:
                replica = int(seg[2])
            except (IndexError, ValueError):
                return _json({"error": "bad replica"}, 404)
            if not 0 <= replica < len(self.d.replicas):
                return _json({"error": "no such replica"}, 404)
            explicit = True
            path = "/" + seg[3] if len(seg) > 3 else "/"
        if replica is None:
            replica = 0
        if method not in ("GET", "HEAD", "POST"):
            return _json({"error": "method not allowed"}, 405)
        if path.startswith("/control/"):
            if not self._authorised(headers or {}):
                return Response(
                    401,
                    json.dumps({"error": "control endpoints need the control token"}).encode()
                    + b"\n",
                    headers=(("WWW-Authenticate", 'Bearer realm="enginesim control"'),),
                )
            return await self._control(method, path, q, body, replica if explicit else None)
        if method == "POST":
            return _json({"error": "method not allowed"}, 405)
        if path == "/router/metrics":
            return self._router_metrics()
        if path == "/":
            return _json(self._index())
        return await self._replica_endpoint(path, q, replica)

    def _authorised(self, headers: dict[str, str]) -> bool:
        if self.control_token is None:
            return True
        scheme, _, given = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.control_token.encode()
        )

    def _index(self) -> dict[str, Any]:
        # Behind a control token the scenario's name is ground truth too.
        scenario = {} if self.control_token else {"scenario": self.d.scenario.name}
        return {
            **scenario,
            "format": self.d.fmt,
            "replicas": len(self.d.replicas),
            "replica_ports": self.replica_ports,
            "sim_time_s": self.d.now(),
            "endpoints": [
                "/metrics",
                "/health",
                "/version",
                "/v1/models",
                "/load",
                "/server_info",
                "/get_server_info",
                "/dcgm/metrics",
                "/logs?offset=N",
                "/profiler/trace?steps=K",
                "/profiler/memory_snapshot?rank=R",
                "/profiler/gc_log",
                "/router/metrics",
                "/control/fix",
                "/control/truth",
                "/control/clock",
                "/control/scenario",
                "/control/advance?seconds=S",
                "/replicas/{i}/...",
            ],
        }

    def _router_metrics(self) -> Response:
        self.d.sync()
        return _text(router.render(self.d.engines, self.d.epoch_unix), ctype=TEXT_FORMAT)

    def _cached(self, replica: int, kind: str, render: Any) -> bytes:
        eng = self.d.replicas[replica].engine
        key = (replica, kind)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == eng.version:
            return hit[1]
        data = render().encode()
        self._cache[key] = (eng.version, data)
        return data

    async def _replica_endpoint(self, path: str, q: dict[str, str], i: int) -> Response:
        d = self.d
        rep = d.replicas[i]
        d.sync(i)
        eng = rep.engine
        if path == "/metrics":
            if not eng.is_up:
                return _text("engine restarting\n", 503)
            render = d.flavour.render
            data = self._cached(i, d.fmt, lambda: render(eng, rep.engine_label))
            return Response(200, data, TEXT_FORMAT)
        if path == "/health":
            return _text("", 200 if eng.is_up else 503)
        if path == "/version":
            return _json({"version": d.flavour.version})
        if path == "/v1/models":
            # The OpenAI-compatible model list vLLM and SGLang both serve, with the
            # context length they add to each model card.
            cfg = eng.cfg
            card = {
                "id": cfg.model_name,
                "object": "model",
                "created": int(d.epoch_unix),
                "owned_by": d.fmt.split("-")[0],
                "root": cfg.model_name,
                "parent": None,
                "max_model_len": cfg.max_model_len,
            }
            return _json({"object": "list", "data": [card]})
        if path == "/load":
            s = eng.sched
            return _json({"server_load": len(s.running) + s.num_waiting})
        if path in ("/server_info", "/get_server_info"):
            server_info = d.flavour.server_info
            if server_info is None:  # like vLLM without dev mode
                return _json({"detail": "Not Found"}, 404)
            port = self.replica_ports[i] if self.replica_ports else self.ports["main"]
            return _json(server_info(eng, port), 200 if eng.is_up else 503)
        if path == "/dcgm/metrics":
            data = self._cached(i, "dcgm", lambda: dcgm.render(rep.gpus, rep.hostname, d.now()))
            return Response(200, data, TEXT_FORMAT)
        if path == "/logs":
            try:
                offset = int(q.get("offset", "0"))
                limit = min(int(q.get("limit", str(1024 * 1024))), 4 * 1024 * 1024)
            except ValueError:
                return _json({"error": "offset and limit must be integers"}, 400)
            data, nxt, start = eng.log.read(max(0, offset), max(1, limit))
            return Response(
                200,
                data,
                "text/plain; charset=utf-8",
                (("X-Log-Next-Offset", str(nxt)), ("X-Log-Start-Offset", str(start))),
            )
        if path.startswith("/profiler/"):
            return await self._profiler(path, q, i)
        return _json({"error": "not found"}, 404)

    async def _profiler(self, path: str, q: dict[str, str], i: int) -> Response:
        from enginesim import profiling

        d = self.d
        eng = d.replicas[i].engine
        try:
            if path == "/profiler/trace":
                steps = max(1, min(int(q.get("steps", "5")), eng.steps.maxlen or 1))
                mode = q.get("mode", "next")
                timeout = max(0.0, min(float(q.get("timeout", "30")), 120.0))
                gz = q.get("gzip", "0") in ("1", "true")
                if mode == "next":
                    start = eng.step_idx
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + timeout
                    while eng.step_idx < start + steps:
                        if loop.time() >= deadline:
                            return _json({"error": "timed out waiting for steps"}, 504)
                        await asyncio.sleep(0.02)
                        d.sync(i)
                    records = profiling.step_records(eng, start, steps)
                elif mode == "last":
                    records = profiling.step_records(eng, eng.step_idx - steps, steps)
                else:
                    return _json({"error": "mode must be next or last"}, 400)
                body = profiling.chrome_trace(eng, records, gzip=gz)
                return Response(200, body, "application/gzip" if gz else "application/json")
            if path == "/profiler/memory_snapshot":
                rank = int(q.get("rank", "0"))
                if not 0 <= rank < len(eng.gpu.ranks):
                    return _json({"error": "no such rank"}, 400)
                return Response(
                    200, profiling.memory_snapshot(eng, rank), "application/octet-stream"
                )
            if path == "/profiler/gc_log":
                return _text(profiling.gc_log(eng))
        except ValueError as exc:
            return _json({"error": str(exc)}, 400)
        return _json({"error": "not found"}, 404)

    async def _control(
        self, method: str, path: str, q: dict[str, str], body: bytes, replica: int | None
    ) -> Response:
        d = self.d
        if path == "/control/truth":
            d.sync()
            return _json(d.truth())
        if path == "/control/clock":
            d.sync()
            return _json(d.clock_report())
        if method != "POST":
            return _json({"error": "use POST"}, 405)
        if path == "/control/advance":
            if d.clock.mode != "manual":
                return _json({"error": "advance needs --clock manual"}, 409)
            try:
                seconds = float(q.get("seconds", "0"))
            except ValueError:
                return _json({"error": "seconds must be a number"}, 400)
            if not 0 <= seconds <= 86400:
                return _json({"error": "seconds must be in [0, 86400]"}, 400)
            # Long advances run in chunks so other connections stay served.
            remaining = seconds
            while remaining > 0:
                chunk = min(remaining, 30.0)
                d.advance(chunk)
                remaining -= chunk
                await asyncio.sleep(0)
            return _json({"sim_time_s": d.now()})
        if path == "/control/fix":
            try:
                changes = json.loads(body or b"{}")
            except ValueError:
                return _json({"error": "body must be JSON"}, 400)
            if not isinstance(changes, dict) or not changes:
                return _json({"error": "body must be a non-empty JSON object"}, 400)
            return _json(d.apply_fix(changes, replica))
        if path == "/control/scenario":
            return self._switch_scenario(body)
        return _json({"error": "not found"}, 404)

    def _switch_scenario(self, body: bytes) -> Response:
        """POST /control/scenario {"scenario": "a" | "a+b", "seed": N}: redeploy in place."""
        if len(body) > MAX_SCENARIO_BODY:
            return _json({"error": f"body larger than {MAX_SCENARIO_BODY} bytes"}, 400)
        try:
            req = json.loads(body or b"")
        except ValueError:
            return _json({"error": "body must be JSON"}, 400)
        if not isinstance(req, dict) or not isinstance(req.get("scenario"), str):
            return _json({"error": 'body must be {"scenario": "<name or a+b>"}'}, 400)
        seed = req.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            return _json({"error": "seed must be an integer"}, 400)
        try:
            truth = self.d.switch_scenario(req["scenario"], seed)
        except (KeyError, ValueError) as exc:
            message = exc.args[0] if exc.args else str(exc)
            return _json({"error": str(message), "scenarios": scenarios.names()}, 400)
        self._cache.clear()  # pages rendered from the old engines
        return _json(truth)
