from __future__ import annotations

import json

import pytest

from probes.parsing.sglang_info import (
    ServerInfoError,
    ServerInfoMalformed,
    ServerInfoTooLarge,
    budget_values,
    parse_server_info,
)

PAYLOAD = {
    "model_path": "meta-llama/Llama-3.1-70B-Instruct",
    "tp_size": 4,
    "dp_size": 2,
    "max_running_requests": 1024,
    "chunked_prefill_size": 8192,
    "mem_fraction_static": 0.88,
    "cuda_graph_max_bs": 160,
    "disable_cuda_graph": False,
    "launch_command": "python -m sglang.launch_server " + "x" * 1000,
    "env_vars": {"HF_TOKEN": "secret"},
    "status": "ready",
    "max_total_num_tokens": 1960896,
    "version": "0.5.23",
    "internal_states": [
        {
            "effective_max_running_requests_per_dp": 512,
            "last_gen_throughput": 1234.5,
            "memory_usage": {
                "weight": 35.1,
                "kvcache": 30.2,
                "token_capacity": 980448,
                "graph": {"decode": 0.4, "prefill": 0.1},
            },
        },
        {"effective_max_running_requests_per_dp": 480, "memory_usage": {"graph": 0.27}},
    ],
}


def test_record_keeps_args_of_interest_and_ranks():
    info = parse_server_info(json.dumps(PAYLOAD).encode())
    assert info.arg("tp_size") == 4 and info.arg("mem_fraction_static") == 0.88
    assert info.arg("disable_cuda_graph") is False and info.arg("version") == "0.5.23"
    assert "env_vars" not in info.args and "launch_command" not in info.args
    assert info.effective_max_running_requests == 992
    first, second = info.ranks
    assert first.weight_gb == 35.1 and first.token_capacity == 980448
    assert first.graph_gb == pytest.approx(0.5) and second.graph_gb == 0.27


def test_odd_types_become_none_and_strings_are_clipped():
    info = parse_server_info(json.dumps({"tp_size": {"x": 1}, "model_path": "m" * 5000}))
    assert info.arg("tp_size") is None and len(info.arg("model_path")) == 256
    assert info.ranks == ()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"[" * 10_000 + b"]" * 10_000, ServerInfoTooLarge),
        (b'{"a": "' + b"x" * (5 * 1024 * 1024) + b'"}', ServerInfoTooLarge),
        (b"\xff\xfe{}", ServerInfoMalformed),
        (b"{not json", ServerInfoMalformed),
        (b"[1, 2]", ServerInfoMalformed),
        (b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', None),
    ],
)
def test_hostile_payloads(data, error):
    if error is None:  # brackets inside strings do not count as depth
        assert parse_server_info(data).args == {}
        return
    with pytest.raises(error) as err:
        parse_server_info(data)
    assert isinstance(err.value, ServerInfoError) and str(err.value)


def test_budget_values_from_the_stored_snapshot():
    """What the flavour table's SGLang entry gives budget discovery: the enforced cap over
    the CLI's, the pool from the args before the ranks', nothing that was not reported."""
    from probes.observe import observe_sglang_info

    snapshot = observe_sglang_info(json.dumps(PAYLOAD).encode()).snapshot
    assert budget_values(snapshot) == {
        "chunked_prefill_size": 8192.0,
        "tp_size": 4.0,
        "max_running_requests": 992.0,
        "kv_capacity_tokens": 1960896.0,
        "served_model": "meta-llama/Llama-3.1-70B-Instruct",
    }
    bare = {"args": {"max_running_requests": 64, "tp_size": 0, "served_model_name": ""}}
    assert budget_values(bare | {"token_capacity": 4096}) == {
        "max_running_requests": 64.0,
        "kv_capacity_tokens": 4096.0,
    }
    assert budget_values({}) == {}
