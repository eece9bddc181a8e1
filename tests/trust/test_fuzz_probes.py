"""What probes read from engines under a fuzzer: Prometheus exposition (engine and DCGM
endpoints), engine log lines, SGLang's server_info and Prometheus API answers.

Property: from arbitrary or mutated bytes, the same function the poll task calls either
returns an observation set whose snapshot can be stored (JSON without NaN, as jsonb needs)
or raises the parser's documented error type (``ExpositionError``, ``ServerInfoError``,
``ProbeError``). The log follower has no error type: every byte string is a log.
Seeds are the real captures in ``shared/samples/metrics`` and the simulator's output.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from functools import cache

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from probes import observe, promapi
from probes.net import FetchResult, ProbeError
from probes.parsing import logevents
from probes.parsing.exposition import ExpositionError, ExpositionLimits, parse_exposition
from probes.parsing.sglang_info import ServerInfoError
from tests.probes.reference_parser import normalized, reference_families
from tests.support.samples import METRICS
from tests.trust.conftest import (
    accepted_or_rejected,
    fuzz_settings,
    json_values,
    mutated,
    need_samples,
    seed_accepted,
)

NOW = datetime(2026, 2, 12, 20, 0, 0, tzinfo=UTC)
PROM_SAMPLES = (
    "sglang_v0.4_docs_llama31-8b_under_load.prom",
    "vllm_v0_aibrix_docs_qwen25-coder-1.5b_truncated.prom",
    "dcgm_exporter_tesla-t4_datadog_fixture.prom",
)
EXPOSITION_TOKENS = (
    b"\n", b"{", b"}", b'="', b'"', b",", b"\\", b'\\"', b"\\n", b" NaN", b" +Inf", b" -Inf",
    b" 1e999", b" -0", b" 0x1p3", b" 1_000", b" 99999999999999999999999", b"# TYPE ",
    b"# HELP ", b" histogram\n", b" counter\n", b" gauge\n", b" summary\n", b"_bucket",
    b'le="+Inf"', b'le="NaN"', b'le="-1"', b"_count", b"_sum", b'__name__="x"', b"\xff",
    b"\xc3\x28", b"\x00", b"\r\n", b" 1700000000000 1700000000000", b"\t",
    b'<img src=x onerror=alert(1)>',
)  # fmt: skip
LOG_TOKENS = (
    b"\n", b"\r", b"\r\n", b"\xff", b"\xe2\x82", b"(EngineCore_DP0 pid=241) ",
    b"INFO 02-12 19:50:09 [gpu_model_runner.py:1] ", b"INFO 02-30 99:99:99 [x.py:1] ",
    b"[2025-01-15 10:23:45 TP0] ", b"[2025-02-30 10:23:45] ", b"CUDA out of memory. ",
    b"Tried to allocate 99999999999999999999 GiB", b"Graph capturing finished in 5 secs, "
    b"took 0.99 GiB", b"Avg prompt throughput: nan tokens/s, ", b"Running: 1e999 reqs, ",
    b"GPU KV cache usage: 101.5%, ", b"Decode batch. #running-req: 1, token usage: 0.5, ",
    b"#retracted_reqs: 3, #new_token_ratio: 0.7 -> 1.0", b"Starting vLLM API server",
    b"Application startup complete.", b"EngineCore encountered a fatal error",
)  # fmt: skip


@cache
def _prom_seeds() -> tuple[bytes, ...]:
    paths = [METRICS / name for name in PROM_SAMPLES]
    need_samples(paths)
    seeds = [p.read_bytes() for p in paths]
    seeds += list(_sim_bodies()[:3])
    return tuple(seeds)


@cache
def _sim_bodies() -> tuple[bytes, bytes, bytes, bytes, bytes]:
    """vLLM V1, SGLang, DCGM scrapes, server_info JSON and an engine log, from the simulator."""
    from enginesim.deployment import Deployment, SimClock
    from enginesim.exposition import dcgm, sglang, vllm

    vd = Deployment("long-prefill-itl", clock=SimClock("manual"), seed=0)
    vd.advance(30)
    rep = vd.replicas[0]
    v1 = vllm.render_v1(rep.engine, rep.engine_label).encode()
    gpus = dcgm.render(rep.gpus, rep.hostname, vd.now()).encode()
    log = rep.engine.log.read(0, 64 * 1024)[0]
    sd = Deployment("healthy", fmt="sglang", clock=SimClock("manual"), seed=0)
    sd.advance(10)
    srep = sd.replicas[0]
    sgl = sglang.render(srep.engine, srep.engine_label).encode()
    info = json.dumps(sglang.server_info(srep.engine, 30000)).encode()
    return v1, sgl, gpus, info, log


def _stored(seen: observe.Observed) -> None:
    json.dumps(seen.snapshot, allow_nan=False)
    for signal, labels, value in seen.observations:
        assert isinstance(signal, str) and isinstance(labels, str)
        assert isinstance(value, float)


@pytest.mark.slow
@fuzz_settings(200)
@given(data=st.data())
@example(data=None)  # the unmutated seeds themselves (see below)
def test_mutated_scrapes_are_observed_or_rejected(data):
    seeds = _prom_seeds()
    blobs = list(seeds) if data is None else [data.draw(mutated(seeds, EXPOSITION_TOKENS))]
    now = NOW.timestamp()
    history = [(now - 15, observe.observe_engine(seeds[3], [], now - 15, 60).snapshot)]
    if data is None:  # the seeds: parsed to what prometheus_client reads, and observed
        for index, seed in enumerate(seeds):
            ours = seed_accepted(lambda s=seed: parse_exposition(s))
            assert normalized(list(ours.families.values())) == normalized(reference_families(seed))
            dcgm = index in (2, 5)  # the DCGM capture and the simulator's DCGM scrape
            if dcgm:
                seen = seed_accepted(lambda s=seed: observe.observe_dcgm(s))
            else:
                seen = seed_accepted(lambda s=seed: observe.observe_engine(s, history, now, 60))
            assert seen.observations, index
            _stored(seen)
    for blob in blobs:
        engine = accepted_or_rejected(
            lambda b=blob: observe.observe_engine(b, history, now, 60), (ExpositionError,)
        )
        gpus = accepted_or_rejected(lambda b=blob: observe.observe_dcgm(b), (ExpositionError,))
        for seen in (engine, gpus):
            if seen is not None:
                _stored(seen)


SMALL_EXPOSITION = '# TYPE x_total counter\nx_total{a="b"} 3\n'


@fuzz_settings(200)
@given(text=st.text(alphabet=st.sampled_from('abc_:{}="\\, \n#\t0123456789.eE+-InfNaTYPEHLP'),
                    max_size=300))  # fmt: skip
@example(text='x{le="+Inf"} 1\nx{le="1"} 2\n# TYPE x histogram\n')
@example(text='# TYPE x histogram\nx_bucket{le="NaN"} 1\nx_count NaN\nx_sum 1e999\n')
@example(text=SMALL_EXPOSITION)
def test_exposition_shaped_noise_is_parsed_or_rejected(text):
    limits = ExpositionLimits(max_bytes=4096, max_line_bytes=256, max_series=50)
    if text == SMALL_EXPOSITION:
        small = seed_accepted(lambda: parse_exposition(text, limits))
        assert [(s.name, s.labels, s.value) for s in small.samples("x_total")] == [
            ("x_total", (("a", "b"),), 3.0)
        ]
    accepted_or_rejected(lambda: parse_exposition(text, limits), (ExpositionError,))
    result = accepted_or_rejected(
        lambda: observe.observe_engine(text.encode(), [], NOW.timestamp(), 60), (ExpositionError,)
    )
    if result is not None:
        _stored(result)


@pytest.mark.slow
@fuzz_settings(200)
@given(data=st.data())
@example(data=None)  # the unmutated log: every line an event, and observed
def test_mutated_engine_logs_always_become_events(data):
    log = _sim_bodies()[4]
    if data is None:
        events = seed_accepted(lambda: logevents.parse_log(log, NOW))
        assert len(events) == log.count(b"\n") > 0, (len(events), log.count(b"\n"))
        whole = observe.observe_log(observe.state_from_json(None), log, NOW)[1]
        assert whole.observations
        _stored(whole)
        return
    blob = data.draw(mutated((log, log[-4096:]), LOG_TOKENS))
    # Chunk boundaries anywhere (mid-line, mid-UTF-8): the follower carries state across polls.
    cuts = sorted(data.draw(st.lists(st.integers(0, len(blob)), max_size=5)))
    state = observe.state_from_json(None)
    start = 0
    for cut in [*cuts, len(blob)]:
        state, seen = observe.observe_log(state, blob[start:cut], NOW)
        _stored(seen)
        # The state goes through the snapshot (JSON) between polls, as the task stores it.
        state = observe.state_from_json(json.loads(json.dumps(seen.snapshot["follower"])))
        start = cut
    logevents.parse_log(blob, NOW, max_line=data.draw(st.integers(1, 512)))


@pytest.mark.slow
@fuzz_settings(150)
@given(data=st.data())
@example(data=None)  # the unmutated answer: observed, its numbers as the server said them
def test_mutated_server_info_is_observed_or_rejected(data):
    info = _sim_bodies()[3]
    if data is None:
        seen = seed_accepted(lambda: observe.observe_sglang_info(info))
        doc = json.loads(info)
        assert seen.observations
        assert f'"max_total_num_tokens": {doc["max_total_num_tokens"]}' in json.dumps(seen.snapshot)
        _stored(seen)
        return
    if data.draw(st.booleans()):
        blob = data.draw(mutated((info,), (b"{", b"[", b'"', b"NaN", b"1e999", b"-1", b"null")))
    else:
        doc = json.loads(info)
        key = data.draw(st.sampled_from(sorted(doc)))
        doc[key] = data.draw(json_values() | st.sampled_from([math.nan, math.inf, -1, 1 << 80]))
        blob = json.dumps(doc).encode()
    result = accepted_or_rejected(lambda: observe.observe_sglang_info(blob), (ServerInfoError,))
    if result is not None:
        _stored(result)


PROM_ANSWER = (
    b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"up",'
    b'"job":"vllm"},"value":[1700000000.5,"1"]}]}}',
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":'
    b'[[1700000000,"0.5"],[1700000015,"NaN"],[1700000030,"+Inf"]]}]},"warnings":["w"]}',
    b'{"status":"error","errorType":"bad_data","error":"parse error at char 3"}',
    b'{"status":"success","data":{"resultType":"scalar","result":[1700000000,"2"]}}',
)


def _prometheus_seeds_intact() -> None:
    """The three success answers are read with their values; the error answer is refused."""
    read = []
    for blob in (PROM_ANSWER[0], PROM_ANSWER[1], PROM_ANSWER[3]):
        fetched = FetchResult(
            "http://127.0.0.1:9090/api/v1/query", 200, "application/json", blob, 0.01
        )
        read.append(seed_accepted(lambda f=fetched: promapi.parse_response(f)))
    assert [r.result_type for r in read] == ["vector", "matrix", "scalar"]
    assert read[2].scalar == 2.0 and read[0].warnings == () and read[1].warnings == ("w",)
    refused = FetchResult(
        "http://127.0.0.1:9090/api/v1/query", 400, "application/json", PROM_ANSWER[2], 0.01
    )
    with pytest.raises(ProbeError, match="parse error"):
        promapi.parse_response(refused)


@fuzz_settings(150)
@given(data=st.data())
@example(data=None)
def test_mutated_prometheus_answers_are_read_or_refused(data):
    if data is None:
        _prometheus_seeds_intact()
        blob, status = b"[" * 100_000, 200
    else:
        blob = data.draw(mutated(PROM_ANSWER, (b"{", b"[", b'"', b"NaN", b"1e999", b"null")))
        status = data.draw(st.sampled_from([200, 400, 422, 500, 503]))
    fetched = FetchResult(
        "http://127.0.0.1:9090/api/v1/query", status, "application/json", blob, 0.01
    )
    result = accepted_or_rejected(lambda: promapi.parse_response(fetched), (ProbeError,))
    if result is not None:
        observe.observe_prometheus([("up", result)])
