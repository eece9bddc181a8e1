"""Start a real vLLM server on 127.0.0.1 with a scenario's flags; stop it by its process group.

The server runs in a session of its own (``start_new_session``), so its engine-core
child and any helpers share one process group: stopping sends SIGTERM to the group,
waits, then SIGKILLs whatever is left, and checks the group is empty. No strays
survive a test, even one that failed half-way through starting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from realengine.cpu import machine_dtype
from realengine.install import SERVER_MODULE, Install
from realengine.priority import ENGINE_NICENESS, lower_session_group

SERVED_NAME = "tiny-llama"
START_TIMEOUT_S = 900  # a cold start on a busy 2-core machine took ~2 minutes; be generous
STOP_TIMEOUT_S = 30
LOG_TAIL = 4000


class EngineStartError(RuntimeError):
    """The server exited or never became healthy; the message carries its log's tail."""


@dataclass(frozen=True)
class EngineFlags:
    """The engine's configuration, as the flags a scenario (or a fix) changes."""

    max_model_len: int = 1024
    num_gpu_blocks_override: int | None = 96  # 96 x 128-token blocks = 12,288 KV tokens
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None
    scheduling_policy: str | None = None  # "priority" to honour request priorities
    kvcache_space_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE
    # vLLM's --stream-interval: a streamed response carries 16 tokens a chunk, so the API
    # server does a sixteenth of its per-token work (JSON, SSE, HTTP) for a storm's
    # streams. Measured on 2 cores (11 seats, 2.4 requests/s of 300 + 600 tokens): client
    # TTFT 3.1 s mean at one token a chunk, 0.69 s at 16, with engine-side p95 TTFT under
    # 0.1 s; the rest of that gap was the CPU (realengine.priority). The engine's ITL and
    # TTFT histograms still count every token (84,278 ITL observations for 84,420 tokens).
    stream_interval: int | None = 16
    # None: the dtype this CPU computes in hardware (realengine.cpu).
    dtype: str | None = None
    extra: tuple[str, ...] = ()

    def with_changes(self, **changes) -> EngineFlags:
        return dataclasses.replace(self, **changes)

    def args(self) -> list[str]:
        out = [
            "--load-format", "dummy", "--skip-tokenizer-init", "--enforce-eager",
            "--dtype", self.dtype or machine_dtype(), "--max-model-len", str(self.max_model_len),
        ]  # fmt: skip
        optional = {
            "--num-gpu-blocks-override": self.num_gpu_blocks_override,
            "--max-num-seqs": self.max_num_seqs,
            "--max-num-batched-tokens": self.max_num_batched_tokens,
            "--scheduling-policy": self.scheduling_policy,
            "--stream-interval": self.stream_interval,
        }
        for flag, value in optional.items():
            if value is not None:
                out += [flag, str(value)]
        if self.enable_chunked_prefill is not None:
            out.append(
                "--enable-chunked-prefill"
                if self.enable_chunked_prefill
                else "--no-enable-chunked-prefill"
            )
        return [*out, *self.extra]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback
        return response.status, response.read(1 << 20)


@dataclass
class EngineServer:
    install: Install
    model_dir: Path
    flags: EngineFlags
    log_path: Path
    port: int = 0
    process: subprocess.Popen | None = None
    started_at: float | None = None
    cold_start_s: float | None = None
    env_overrides: dict[str, str] = field(default_factory=dict)
    # The engine's session behind the load generator and the observers (see
    # realengine.priority); None leaves it as started.
    engine_niceness: int | None = ENGINE_NICENESS
    niceness_applied: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def command(self) -> list[str]:
        return [
            str(self.install.python), "-m", SERVER_MODULE,
            "--model", str(self.model_dir), "--served-model-name", SERVED_NAME,
            "--host", "127.0.0.1", "--port", str(self.port), *self.flags.args(),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "CUDA_", "HF_"))}
        env.update(
            VLLM_CPU_KVCACHE_SPACE=str(self.flags.kvcache_space_gib),
            VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1",
        )  # fmt: skip
        env.update(self.env_overrides)
        return env

    def start(self) -> None:
        if self.process is not None:
            raise RuntimeError("already started")
        if not self.port:
            self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"\n$ {' '.join(self.command())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and flags
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    def healthy(self) -> bool:
        try:
            return _get(f"{self.url}/health", timeout=3)[0] == 200
        except (OSError, urllib.error.URLError):
            return False

    def log_tail(self, size: int = LOG_TAIL) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Seconds from start to a 200 on /health; raises EngineStartError otherwise."""
        if self.process is None or self.started_at is None:
            raise RuntimeError("not started")
        deadline = self.started_at + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise EngineStartError(
                    f"vLLM exited with {code} while starting:\n{self.log_tail()}"
                )
            if self.healthy():
                self.cold_start_s = time.monotonic() - self.started_at
                if self.engine_niceness is not None:
                    self.niceness_applied = lower_session_group(
                        self.process.pid, self.engine_niceness
                    )
                return self.cold_start_s
            time.sleep(1.0)
        raise EngineStartError(f"vLLM not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")

    def group_alive(self) -> bool:
        if self.process is None:
            return False
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self) -> None:
        """SIGTERM the group, wait, SIGKILL what is left; never leaves a stray process."""
        if self.process is None:
            return
        pgid = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_TIMEOUT_S)
        while self.group_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        end = time.monotonic() + 10
        while self.group_alive() and time.monotonic() < end:
            time.sleep(0.1)
        self.process = None

    def restart(self, flags: EngineFlags, timeout_s: float = START_TIMEOUT_S) -> float:
        """Stop, start again with ``flags`` on the same port, wait for health."""
        self.stop()
        self.flags = flags
        self.start()
        return self.wait_healthy(timeout_s)

    def __enter__(self) -> EngineServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
