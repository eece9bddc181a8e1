"""The budget arithmetic of the playbook comes out of the model, not out of constants."""

from __future__ import annotations

import random

import pytest

from enginesim.config import ConfigError, DeploymentConstants, EngineConfig, default_capture_sizes
from enginesim.engine import Engine
from enginesim.scheduler import DECODE
from enginesim.steptime import mixed_step_ceiling_s, step_cost
from enginesim.workload import LengthDist, RateProfile, WorkloadSpec

C = DeploymentConstants()


def test_kv_capacity_is_114688_tokens_per_rank():
    assert C.kv_capacity_tokens == 114_688
    assert C.weights_bytes_per_rank == 35 * 1024**3


def test_step_time_arithmetic():
    base = step_cost(C, prefill_tokens=0, num_decode=20, context_tokens=20_000, num_seqs=20,
                     cuda_graph=True)  # fmt: skip
    big = step_cost(C, prefill_tokens=4096, num_decode=20, context_tokens=20_000 + 4096,
                    num_seqs=21, cuda_graph=True)  # fmt: skip
    assert big.total_s - base.total_s == pytest.approx(4096 * 0.035e-3, rel=0.01)  # ~143 ms
    assert 0.046 < base.total_s < 0.050  # a decode step stays near 48 ms
    assert mixed_step_ceiling_s(C, 512) == pytest.approx(0.063, abs=0.0005)
    chunk = step_cost(C, prefill_tokens=512 - 20, num_decode=20, context_tokens=20_000,
                      num_seqs=21, cuda_graph=True)  # fmt: skip
    assert 0.060 < chunk.total_s < 0.067
    slow = step_cost(C, prefill_tokens=0, num_decode=20, context_tokens=20_000, num_seqs=20,
                     cuda_graph=True, rank_slowdown=1410 / 1200)  # fmt: skip
    assert slow.total_s > base.total_s * 1.15


def test_config_validation():
    with pytest.raises(ConfigError):
        EngineConfig(max_num_seqs=0)
    with pytest.raises(ConfigError):
        EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=2048)
    assert default_capture_sizes(40)[-1] == 80
    assert default_capture_sizes(1024)[-1] == 512


def test_rate_profile_interpolates_and_repeats():
    r = RateProfile(((0.0, 1.0), (10.0, 3.0)), period_s=20.0)
    assert r.rate_at(5.0) == pytest.approx(2.0)
    assert r.rate_at(25.0) == pytest.approx(2.0)
    assert r.max_rate == 3.0
    d = LengthDist(median=100, sigma=0.5, lo=10, hi=200)
    rng = random.Random(1)
    assert all(10 <= d.sample(rng) <= 200 for _ in range(1000))


@pytest.mark.parametrize("leak", [0.0, 0.2])
def test_blocks_are_conserved_under_preemption(leak):
    wl = WorkloadSpec(
        rate=RateProfile.constant(3.0),
        prompt=LengthDist(median=3000, sigma=0.3, lo=100, hi=8000),
        output=LengthDist(median=800, sigma=0.3, lo=10, hi=3000),
    )
    e = Engine(0, constants=C, config=EngineConfig(kv_leak_fraction=leak), workload=wl, seed=5)
    for t in range(10, 400, 10):
        e.advance_to(float(t))
        s = e.sched
        held = 0
        for r in s.running.values():
            if r.state == DECODE:
                held += s._blocks_for(r, r.ctx0 + (e.step_idx - r.s0))
            else:
                held += r.blocks
        assert s.free_blocks >= 0
        assert held + s.free_blocks + s.leaked_blocks + s.prefix_blocks == s.total_blocks
        assert len(s.running) <= e.cfg.max_num_seqs
    assert e.metrics.num_preemptions > 0  # the workload overflows the pool


def test_prefix_cache_hits():
    wl = WorkloadSpec(rate=RateProfile.constant(2.0), shared_prefix_tokens=512)
    e = Engine(0, constants=C, config=EngineConfig(enable_prefix_caching=True), workload=wl,
               seed=1)  # fmt: skip
    e.advance_to(60.0)
    assert e.sched.prefix_hits > 0.3 * e.sched.prefix_queries
    assert e.metrics.prompt_tokens_cached > 0
