"""The simulator's flavour registry: every entry is complete, and what the product reads
from its /metrics detects as the flavour it claims to be."""

from __future__ import annotations

import pytest

from enginesim import flavours
from enginesim.deployment import Deployment, SimClock
from probes.parsing.engine import detect_flavour, engine_name, engine_signals, flavour_of
from probes.parsing.exposition import parse_exposition


def test_unknown_format_names_the_registry():
    with pytest.raises(ValueError, match="vllm-v1, vllm-v0 or sglang"):
        Deployment("healthy", fmt="tgi", clock=SimClock("manual"))


@pytest.mark.parametrize("name", flavours.names())
def test_each_flavour_renders_what_the_product_detects(name):
    flavour = flavours.get(name)
    d = Deployment("healthy", replicas=1, fmt=name, seed=0, clock=SimClock("manual"))
    d.advance(30)
    rep = d.replicas[0]
    body = flavour.render(rep.engine, rep.engine_label)
    assert all(
        line.startswith(("#", f"{flavour.prefix}:"))
        for line in body.splitlines()
        if line and not line.startswith("process_")
    )
    signals = engine_signals(parse_exposition(body))
    assert detect_flavour(parse_exposition(body)) == name  # the product's key is the same
    assert engine_name(name) is not None
    assert {"ttft", "itl", "e2e", "queue_time"} <= set(flavour.buckets)
    assert "ttft" in signals.histograms and "requests_running" in signals.gauges
    # The simulator serves a configuration endpoint exactly where the product's table
    # expects one (SGLang's /server_info): budget discovery is tested against it.
    product = flavour_of(name)
    assert product is not None
    assert (flavour.server_info is not None) == (product.info_endpoint is not None)
    assert rep.engine.log.read(0)[0]  # its log style wrote a start-up
