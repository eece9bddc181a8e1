"""enginesim: a simulated Atlas inference deployment (vLLM-V1-like engines) serving real HTTP.

The package has no Django dependency on purpose: it is the test bed, the demo and the drill
target for Atlas Console's probes, and it must run standalone (`python -m enginesim`).
"""

from enginesim.config import DeploymentConstants, EngineConfig

__all__ = ["DeploymentConstants", "EngineConfig"]
