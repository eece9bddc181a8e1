"""A real vLLM (PyPI's CPU build) as a test bed: install, configure, start, stop.

Django-free on purpose: tests, benchmarks and the demo drive it without a settings
module, and the engine itself lives in its own virtual environment (its torch, its
FastAPI) so nothing it pins leaks into the product's environment.
"""

from realengine.install import VLLM_VERSION, Install, InstallError, ensure_installed
from realengine.model import write_tiny_model
from realengine.server import EngineFlags, EngineServer, EngineStartError

__all__ = [
    "VLLM_VERSION",
    "EngineFlags",
    "EngineServer",
    "EngineStartError",
    "Install",
    "InstallError",
    "ensure_installed",
    "write_tiny_model",
]
