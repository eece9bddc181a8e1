"""Serve fixed bodies over real HTTP on 127.0.0.1, as an endpoint that answers the same
excerpt on every poll (a pasted scrape, a captured dcgm-exporter page)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serve(bodies: Mapping[str, bytes], content_type: str = "text/plain") -> Iterator[str]:
    """``{"/metrics": b"..."}`` -> base URL; unknown paths answer 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies.get(self.path.split("?", 1)[0])
            self.send_response(404 if body is None else 200)
            payload = b"" if body is None else body
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
