"""The load generator against the real engine: what it sent is what the engine counted."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadgen.client import run_plan
from loadgen.plan import LengthMix, poisson_plan
from loadgen.report import summarize


def _counter(url: str, name: str) -> float:
    text = httpx.get(url, timeout=10, trust_env=False).text
    families = text_string_to_metric_families(text)
    return sum(s.value for f in families if f.name == name for s in f.samples
               if s.name == f"{name}_total")  # fmt: skip


def test_open_loop_run_is_counted_by_the_engine(engine):
    before_prompt = _counter(engine.metrics_url, "vllm:prompt_tokens")
    before_gen = _counter(engine.metrics_url, "vllm:generation_tokens")
    plan = poisson_plan(
        3.0, prompt=LengthMix.parse("0.7:40-120,0.3:400-500"), output=LengthMix.parse("8-24"),
        seed=5, count=20,
    )  # fmt: skip
    result = run_plan(plan, engine.url, model="tiny-llama", seed=5, request_timeout_s=120)
    report = summarize(result.outcomes, result.wall_s)
    assert report["statuses"] == {"ok": 20}
    assert report["output_tokens_received"] == sum(r.max_tokens for r in plan)  # ignore_eos
    assert all(o.finish_reason == "length" for o in result.outcomes)
    assert report["ttft_s"]["count"] == 20
    assert report["itl_s"]["count"] == sum(r.max_tokens - 1 for r in plan)
    after_prompt = _counter(engine.metrics_url, "vllm:prompt_tokens")
    after_gen = _counter(engine.metrics_url, "vllm:generation_tokens")
    assert after_prompt - before_prompt == report["prompt_tokens_sent"]
    assert after_gen - before_gen == report["output_tokens_received"]
