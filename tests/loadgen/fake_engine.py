"""A small local completions server that streams the way vLLM does (SSE, token_ids per
chunk, a final usage chunk, ``data: [DONE]``), for the load generator's own tests."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Behaviour:
    step_s: float = 0.001  # between chunks
    tokens_per_chunk: int = 1
    fail_prompt_len: int | None = None  # answer 503 to prompts of this length
    hang_prompt_len: int | None = None  # never finish prompts of this length
    # HTTP/1.1 keep-alive as uvicorn (vLLM's server) does it, and its idle timer firing
    # just as a reused connection's next request arrives: that request is read and the
    # connection closed with no answer (the race a client keep-alive expiry equal to the
    # server's 5 s runs into on a busy machine).
    keep_alive_race: bool = False
    connections: int = 0
    bodies: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(behaviour: Behaviour):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if behaviour.keep_alive_race else "HTTP/1.0"
        served = 0

        def log_message(self, *args) -> None:  # quiet
            pass

        def setup(self) -> None:
            super().setup()
            with behaviour.lock:
                behaviour.connections += 1

        def _chunk(self, data: bytes) -> None:
            if behaviour.keep_alive_race:
                data = f"{len(data):x}\r\n".encode() + data + b"\r\n"
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length))
            self.served += 1
            if behaviour.keep_alive_race and self.served > 1:
                self.close_connection = True  # the idle timer fired: no answer
                return
            with behaviour.lock:
                behaviour.bodies.append(body)
            prompt_len = len(body["prompt"])
            if prompt_len == behaviour.fail_prompt_len:
                self.send_response(503)
                self.end_headers()
                self.wfile.write(b'{"error": "overloaded"}')
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            if behaviour.keep_alive_race:
                self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            remaining = body["max_tokens"]
            try:
                while remaining > 0:
                    if prompt_len == behaviour.hang_prompt_len:
                        time.sleep(0.05)
                        continue
                    time.sleep(behaviour.step_s)
                    n = min(behaviour.tokens_per_chunk, remaining)
                    remaining -= n
                    choice = {
                        "index": 0,
                        "text": "",
                        "token_ids": [7] * n,
                        "finish_reason": "length" if remaining == 0 else None,
                    }
                    self._chunk(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
                    self.wfile.flush()
                usage = {"prompt_tokens": prompt_len, "completion_tokens": body["max_tokens"]}
                self._chunk(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                if behaviour.keep_alive_race:
                    self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 refuses bursts of open-loop arrivals


@contextlib.contextmanager
def fake_engine(behaviour: Behaviour | None = None) -> Iterator[tuple[str, Behaviour]]:
    behaviour = behaviour or Behaviour()
    server = _Server(("127.0.0.1", 0), _handler(behaviour))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", behaviour
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
