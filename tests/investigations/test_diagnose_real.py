"""`manage.py diagnose` on real excerpts users posted, each served over real HTTP on
127.0.0.1 as the endpoint's answer: the sidecar's situation is reached where one excerpt
can decide it, and everything else stays inconclusive, never wrong."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from probes.parsing.engine import KNOWN_ENGINES
from tests.support.samples import REAL, samples_absent
from tests.support.static_http import serve

pytestmark = pytest.mark.skipif(samples_absent(REAL), reason="shared samples not mounted")

ENGINE = (
    sorted([*(REAL / "vllm_metrics").glob("*.prom"), *(REAL / "sglang_metrics").glob("*.prom")])
    if REAL.is_dir()
    else []
)
DCGM = sorted((REAL / "dcgm").glob("*.prom")) if REAL.is_dir() else []
# Excerpts with nothing an engine probe can read: the user is told, nothing is concluded.
UNUSABLE = {
    "meetkai263_v0_0.5.4_help_type_no_samples.prom": f"no {KNOWN_ENGINES} series in the answer",
    "ps617_v1_0.10.0_glm45_params_hist.prom": "none that Atlas reads",
    "v0_0.5.1_70b_tp8_ttft_all_zero_bug.prom": "no +Inf bucket",
    "v0_0.5.3_70b_h100_prompt_gen_tokens_hist.prom": "no +Inf bucket",
    "v0_opt125m_ttft_hist_degradation.prom": "none that Atlas reads",
    "v1_0.10.x_two_api_servers_engine1_decode_time.prom": "none that Atlas reads",
}
# Idle engines whose KV usage is in the excerpt: read and well under pressure, but two polls
# 0.1 s apart cannot say the max over the check's window stayed there (a cache fills in a
# minute): the check waits for the window to be seen, it does not rule KV pressure out.
KV_IDLE = {
    "ps617_v1_0.10.0_glm45_kv_prefix.prom",
    "qwen3vl55_v0_0.6_qwenvl_gauges.prom",
    "sglang_pr4444_0.4.4_unified_engine_type.prom",
}


def _diagnose(symptom: str, kind: str, body: bytes) -> dict:
    with serve({"/x": body}) as base:
        out = StringIO()
        call_command(
            "diagnose", "--symptom", symptom, f"--{kind}", f"{base}/x", "--interval", "0.1",
            "--cycles", "2", "--json", stdout=out,
        )  # fmt: skip
    return json.loads(out.getvalue())


def _nodes(report: dict) -> dict:
    stack, out = list(report["hypotheses"]), {}
    while stack:
        node = stack.pop()
        out[node["key"]] = node
        stack.extend(node["children"])
    return out


def _assert_nothing_confirmed(report: dict) -> None:
    assert report["root_cause"] is None
    confirmed = [k for k, n in _nodes(report).items() if n["suggestion"] == "confirm"]
    assert confirmed == []


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: p.name)
def test_real_engine_excerpts_reach_their_situation_or_stay_inconclusive(path):
    report = _diagnose("high-ttft", "engine", path.read_bytes())
    _assert_nothing_confirmed(report)  # every sidecar: idle, healthy or a metrics defect
    assert report["alarm"]["firing"] is not True
    errors = [e for errs in report["probe_errors"].values() for e in errs]
    if path.name in UNUSABLE:
        assert errors and all(UNUSABLE[path.name] in e for e in errors)
        assert all(c["measured"] is None for n in _nodes(report).values() for c in n["evidence"])
    else:
        assert errors == []
    if path.name in KV_IDLE:
        pressure = _nodes(report)["kv-cache-pressure"]
        kv = next(c for c in pressure["evidence"] if c["check"] == "kv-usage")
        assert kv["measured"] < kv["eliminate_threshold"]
        assert kv["outcome"] == "inconclusive"
        assert kv["needs_more_data"].startswith("needs ≥") and kv["needs_s"] > 0
        assert pressure["suggestion"] == "inconclusive"


@pytest.mark.parametrize("path", DCGM, ids=lambda p: p.name)
def test_real_dcgm_excerpts_of_idle_gpus_confirm_nothing(path):
    for symptom in ("itl-spikes", "throughput-drop"):
        report = _diagnose(symptom, "dcgm", path.read_bytes())
        _assert_nothing_confirmed(report)
        assert report["probe_errors"] == {}
        for key in ("gpu-throttling", "tp-straggler"):
            assert _nodes(report)[key]["suggestion"] == "inconclusive"


def test_an_idle_v100_at_135_mhz_is_not_throttling_through_diagnose():
    text = (REAL / "dcgm" / "dcgm_v100_main_power_pcie_util.prom").read_text()
    util = next(x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    clock = util.replace("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK").rsplit(" ", 1)[0]
    body = f"{text}\n# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n{clock} 135\n".encode()
    report = _diagnose("itl-spikes", "dcgm", body)
    _assert_nothing_confirmed(report)
    throttling = _nodes(report)["gpu-throttling"]
    assert throttling["suggestion"] == "inconclusive"
    assert [c["measured"] for c in throttling["evidence"]] == [None, None]
