"""A real HTTP receiver on 127.0.0.1 that records every POST, as a chat's incoming webhook
would receive it; it can start on a port chosen in advance, so a test can have the chat be
down (connection refused) and then come up at the same URL."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    content_type: str
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


@dataclass
class Inbox:
    status: int = 200  # what every POST is answered
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def receiver(inbox: Inbox, port: int = 0) -> Iterator[str]:
    """Serve ``inbox`` on 127.0.0.1:``port`` (0: any); yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            with inbox.lock:
                inbox.received.append(
                    Received(self.path, self.headers.get("Content-Type", ""), body)
                )
            answer = b"ok" if inbox.status < 400 else b"no_service"
            self.send_response(inbox.status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
