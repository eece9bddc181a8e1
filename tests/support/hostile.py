"""A real HTTP server on 127.0.0.1 that misbehaves on purpose, one behaviour per path.

Used by the probe tests: the faults are caused for real over a socket, not mocked.
"""

from __future__ import annotations

import functools
import gzip
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


@functools.cache
def gzip_bomb() -> bytes:
    """64 MiB of zeros in ~64 KiB of gzip, compressed once per process: compressing it per
    request held the server for a third of a second (more on a busy machine), long enough
    for a client's read timeout to fire before its size cap, which the test is about."""
    return gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        try:
            request_line = self.rfile.readline(8192).decode("latin-1")
            while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                pass
            path = request_line.split(" ")[1] if " " in request_line else "/"
            getattr(self, "do_" + path.strip("/").split("?")[0].replace("-", "_"), self.do_ok)(path)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _head(
        self, status: str, headers: dict[str, str], length: int | None, *, close: bool = True
    ) -> None:
        lines = [f"HTTP/1.1 {status}"]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if close:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    def do_ok(self, path: str) -> None:
        body = b"# TYPE up gauge\nup 1\n"
        self._head("200 OK", {"Content-Type": "text/plain"}, len(body))
        self.wfile.write(body)

    def do_metrics(self, path: str) -> None:
        body = (
            b"# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            b"# TYPE vllm:num_requests_waiting gauge\n"
            b'vllm:num_requests_waiting{engine="0",model_name="atlas-70b"} 47.0\n'
            b"# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            b"# TYPE vllm:kv_cache_usage_perc gauge\n"
            b'vllm:kv_cache_usage_perc{engine="0",model_name="atlas-70b"} 0.94\n'
        )
        self._head("200 OK", {"Content-Type": "text/plain; version=0.0.4"}, len(body))
        self.wfile.write(body)

    def do_gzip(self, path: str) -> None:
        body = gzip.compress(b"# TYPE up gauge\nup 1\n" * 100)
        self._head("200 OK", {"Content-Encoding": "gzip"}, len(body))
        self.wfile.write(body)

    def do_truncated_gzip(self, path: str) -> None:
        body = gzip.compress(b"up 1\n" * 1000)[:-12]
        self._head("200 OK", {"Content-Encoding": "gzip"}, len(body))
        self.wfile.write(body)

    def do_chunked(self, path: str) -> None:
        self._head("200 OK", {"Transfer-Encoding": "chunked"}, None)
        for piece in (b"# TYPE up gauge\n", b"up 1\n"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        self.wfile.write(b"0\r\n\r\n")

    def do_drip_chunked(self, path: str) -> None:
        """Endless 1-byte chunks, as fast as the socket takes them: every read finds data
        waiting, so a client whose deadline relies on an idle read never times out."""
        self._head("200 OK", {"Transfer-Encoding": "chunked"}, None)
        burst = b"1\r\nx\r\n" * 8192
        while not self.server.stop.is_set():
            self.wfile.write(burst)

    def do_log_huge_offset(self, path: str) -> None:
        """A log relay whose next offset does not fit in any 64-bit column."""
        body = b"INFO 11-30 12:00:05 engine started\n"
        headers = {"Content-Type": "text/plain", "X-Log-Next-Offset": "99999999999999999999999"}
        self._head("200 OK", headers, len(body))
        self.wfile.write(body)

    def do_header_bomb(self, path: str) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"a" * 200_000 + b"\r\n\r\n")

    def do_close_after(self, path: str) -> None:
        """Says nothing about closing, then closes: an idle keep-alive timeout, compressed."""
        body = b"up 1\n"
        self._head("200 OK", {}, len(body), close=False)
        self.wfile.write(body)

    def do_hang(self, path: str) -> None:
        self.server.stop.wait(30)  # accept, then say nothing

    def do_slow(self, path: str) -> None:
        self._head("200 OK", {"Content-Type": "text/plain"}, 1000)
        for _ in range(1000):
            if self.server.stop.wait(0.5):
                return
            self.wfile.write(b"x")
            self.wfile.flush()

    def do_huge(self, path: str) -> None:
        size = 50 * 1024 * 1024
        self._head("200 OK", {"Content-Type": "text/plain"}, size)
        chunk = b"vllm:num_requests_waiting 1\n" * 2340  # ~64 KiB
        sent = 0
        while sent < size and not self.server.stop.is_set():
            piece = chunk[: size - sent]
            self.wfile.write(piece)
            sent += len(piece)

    def do_gzip_bomb(self, path: str) -> None:
        body = gzip_bomb()
        self._head("200 OK", {"Content-Encoding": "gzip", "Content-Type": "text/plain"}, len(body))
        self.wfile.write(body)

    def do_garbage(self, path: str) -> None:
        self.wfile.write(b"\x00\xffSSH-2.0-not-http\r\n\x13\x37" * 50)

    def do_redirect_metadata(self, path: str) -> None:
        location = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
        self._head("302 Found", {"Location": location}, 0)

    def do_redirect_other_host(self, path: str) -> None:
        port = self.server.server_address[1]
        self._head("302 Found", {"Location": f"http://localhost:{port}/ok"}, 0)

    def do_redirect_other_port(self, path: str) -> None:
        """The same host and scheme on another port (``?port=N``): another origin."""
        port = path.split("port=", 1)[1].split("&", 1)[0] if "port=" in path else "9"
        self._head("302 Found", {"Location": f"http://127.0.0.1:{port}/ok"}, 0)

    def do_redirect_same_origin(self, path: str) -> None:
        self._head("301 Moved Permanently", {"Location": "/ok"}, 0)

    def do_redirect_loop(self, path: str) -> None:
        self._head("302 Found", {"Location": "/redirect-loop"}, 0)

    def do_error(self, path: str) -> None:
        self._head("503 Service Unavailable", {"Content-Type": "text/plain"}, 4)
        self.wfile.write(b"busy")

    def do_missing(self, path: str) -> None:
        self._head("404 Not Found", {"Content-Type": "text/plain"}, 0)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    # socketserver's default listen backlog is 5: a burst of concurrent probes would see
    # dropped SYNs and a one-second retransmit, which reads as a connect timeout.
    request_queue_size = 128

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stop = threading.Event()  # per server, so one server's shutdown ends only its own


@contextmanager
def hostile_server(handler: type[_Handler] | None = None) -> Iterator[str]:
    """Yield the base URL (http://127.0.0.1:PORT) of a running hostile server; ``handler``
    may subclass the hostile handler to add behaviours (a fake Prometheus, say)."""
    server = _Server(("127.0.0.1", 0), handler or _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        time.sleep(0.05)


def guarded_fetch(url: str, policy):
    """One fetch through the probes' guarded client, as a poll makes it (SSRF tests)."""
    import asyncio

    from probes.net import afetch, guarded_async_client

    async def run():
        async with guarded_async_client(policy) as client:
            return await afetch(client, url, policy)

    return asyncio.run(run())
