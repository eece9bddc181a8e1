"""A deployment from its running engines: the simulator's real vLLM and SGLang endpoints over
real HTTP, read once through the probes' guard, proposed with each value's source, saved
with its targets (or not at all)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from deployments.budget import Budget, kv_capacity_tokens
from deployments.models import Deployment
from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from probes import engine_discovery as ed
from probes.models import Target, TargetKind
from tests.support.static_http import serve

pytestmark = pytest.mark.django_db

URL = reverse("discovery:from_engine")
CAPTURE = (
    Path(__file__).resolve().parents[1]
    / "realengine"
    / "captures"
    / "vllm-0.32-cpu-kv-pressure.metrics.txt"
)


@pytest.fixture
def sim(request) -> Iterator[SimServer]:
    fmt, replicas = getattr(request, "param", ("vllm-v1", 1))
    server = SimServer(
        SimDeployment("healthy", fmt=fmt, replicas=replicas, seed=0, clock=SimClock("manual"))
    ).start_in_thread()
    try:
        yield server
    finally:
        server.stop()


def _create_data(page, **changes) -> dict:
    form = page.context["form"]
    data = {name: form[name].value() for name in form.fields}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    return {**data, "step": "create", "urls": page.context["urls_text"], **changes}


def test_a_vllm_engine_fills_the_form_with_sources_and_creates_the_deployment_and_targets(
    sim, client_for, commander, team
):
    base = sim.base_url
    client = client_for(commander)
    page = client.post(URL, {"step": "read", "urls": f"{base}/metrics"})
    assert page.status_code == 200
    body = page.content.decode()
    engine = sim.d.replicas[0].engine
    tokens = engine.sched.total_blocks * engine.cfg.block_size
    # Each value says where it came from.
    assert f"from vllm:cache_config_info kv_cache_size_tokens on {base}/metrics" in body
    assert f"from /v1/models id on {base}/v1/models" in body
    assert f"from /v1/models max_model_len on {base}/v1/models" in body
    initial = page.context["form"].initial
    assert (initial["engine"], initial["model_name"], initial["name"]) == (
        "vllm",
        "atlas-70b",
        "atlas-70b",
    )
    budget = dataclasses.replace(Budget(), kv_budget_gib_per_rank=initial["kv_budget_gib_per_rank"])
    assert kv_capacity_tokens(budget) == tokens
    assert "TTFT target (ms)" in " ".join(page.context["not_reported"])
    assert page.context["targets"] == [
        (
            TargetKind.ENGINE,
            f"127.0.0.1:{sim.ports['main']}",
            f"{base}/metrics",
            "Engine /metrics (vLLM or SGLang)",
        )
    ]
    assert not Deployment.objects.exists()  # reading saves nothing

    data = _create_data(page, team_choice=str(team.pk), name="canary", ttft_target_ms="800")
    data["target"] = [f"{k}|{r}|{u}" for k, r, u, _ in page.context["targets"]]
    saved = client.post(URL, data)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    deployment = Deployment.objects.get(name="canary")
    assert saved["Location"] == reverse("investigations:deployment", args=[deployment.pk])
    assert (deployment.team, deployment.engine, deployment.model_name) == (
        team,
        "vllm",
        "atlas-70b",
    )
    assert deployment.ttft_target_ms == 800  # the commander's, edited before saving
    assert kv_capacity_tokens(deployment.budget) == tokens
    target = Target.objects.get(deployment=deployment)
    assert (target.kind, target.url) == (TargetKind.ENGINE, f"{base}/metrics")
    assert sorted(AuditEntry.objects.values_list("action", flat=True)) == [
        "deployment.create",
        "target.create",
    ]


@pytest.mark.parametrize("sim", [("sglang", 1)], indirect=True)
def test_an_sglang_engine_is_read_from_its_server_info_too(sim, client_for, commander):
    base = sim.base_url
    page = client_for(commander).post(URL, {"step": "read", "urls": base})
    assert page.status_code == 200
    initial = page.context["form"].initial
    cfg = sim.d.replicas[0].engine.cfg
    assert initial["engine"] == "sglang"
    assert initial["max_num_seqs"] == cfg.max_num_seqs
    assert initial["max_num_batched_tokens"] == cfg.max_num_batched_tokens
    assert f"from SGLang /server_info on {base}/server_info" in page.content.decode()
    kinds = [kind for kind, *_ in page.context["targets"]]
    assert kinds == [TargetKind.ENGINE, TargetKind.SGLANG_INFO]


@pytest.mark.parametrize("sim", [("vllm-v1", 2)], indirect=True)
def test_two_replicas_are_two_targets_and_the_smaller_pool_is_the_budget(sim):
    base = sim.base_url
    urls = [f"{base}/replicas/0", f"{base}/replicas/1/metrics"]
    answers = ed.read_engines(ed.parse_urls("\n".join(urls)), _policy())
    assert [a.flavour for a in answers] == ["vllm-v1", "vllm-v1"]
    report = ed.merge(answers)
    pools = [a.value("kv_capacity_tokens") for a in answers]
    assert report.values()["kv_capacity_tokens"] == min(pools)
    assert ed.replica_names([a.url for a in answers]) == [
        f"127.0.0.1:{sim.ports['main']}/replicas/0",
        f"127.0.0.1:{sim.ports['main']}/replicas/1",
    ]


def _policy():
    from probes.policy import fetch_policy

    return fetch_policy()


def test_an_unreachable_engine_proposes_nothing_and_says_why(client_for, commander):
    page = client_for(commander).post(URL, {"step": "read", "urls": "http://127.0.0.1:9"})
    assert page.status_code == 200
    assert page.context["proposals"] == []
    assert page.context["targets"] == []
    assert any("127.0.0.1:9/metrics" in p for p in page.context["problems"])


def test_a_blocked_address_is_refused_by_the_guard_not_fetched(client_for, commander):
    page = client_for(commander).post(URL, {"step": "read", "urls": "http://169.254.169.254/"})
    assert page.status_code == 200
    assert any("blocked-address" in p for p in page.context["problems"])


def test_a_refused_target_saves_nothing(sim, client_for, commander, team):
    client = client_for(commander)
    page = client.post(URL, {"step": "read", "urls": sim.base_url})
    data = _create_data(page, team_choice=str(team.pk), name="canary")
    data["target"] = ["engine|r0|ftp://127.0.0.1/metrics"]
    refused = client.post(URL, data)
    assert refused.status_code == 400
    assert "Target refused" in refused.content.decode()
    assert not Deployment.objects.exists()
    assert not AuditEntry.objects.exists()


def test_a_forged_target_kind_is_ignored(sim, client_for, commander, team):
    client = client_for(commander)
    page = client.post(URL, {"step": "read", "urls": sim.base_url})
    data = _create_data(page, team_choice=str(team.pk), name="canary")
    data["target"] = ["log_file|r0|http://127.0.0.1/x", "nvml|r0|http://127.0.0.1/"]
    assert client.post(URL, data).status_code == 302
    assert not Target.objects.exists()


@pytest.mark.parametrize(
    "text, error",
    [
        ("", "required"),
        ("   \n  ", "required"),
        ("ftp://h/metrics", "scheme"),
        ("http://h:8000/metrics?x=1", "without ? or #"),
        (" ".join(f"http://h:{8000 + i}" for i in range(17)), "At most 16"),
    ],
)
def test_engine_urls_that_cannot_be_engines_are_refused(text, error, client_for, commander):
    page = client_for(commander).post(URL, {"step": "read", "urls": text})
    assert page.status_code == 400
    assert error in page.content.decode()


def test_the_base_the_metrics_url_and_a_trailing_slash_are_one_engine():
    assert ed.parse_urls("http://h:8000\nhttp://h:8000/ http://h:8000/metrics") == ["http://h:8000"]
    assert ed.endpoints("http://h:8000/prefix/metrics").models == "http://h:8000/prefix/v1/models"


def test_responders_and_viewers_cannot_read_engines(client_for, responder, viewer):
    for user in (responder, viewer):
        assert client_for(user).post(URL, {"urls": "http://127.0.0.1:9"}).status_code == 403


# --- the pure readers, on real and hostile bodies ------------------------------------------


def test_a_real_vllm_032_scrape_names_its_label_and_blocks():
    _, readings, problems = ed.read_metrics(CAPTURE.read_bytes(), "http://e/metrics")
    by_key = {r.key: r for r in readings}
    assert problems == []
    assert by_key["kv_capacity_tokens"].value == 96 * 128
    assert by_key["kv_blocks"].source == "vllm:cache_config_info num_gpu_blocks on http://e/metrics"
    assert by_key["served_model"].value == "tiny-llama"


@pytest.mark.parametrize(
    "body, problem",
    [
        (b"x" * (ed.MAX_MODELS_BYTES + 1), "is not a model list"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 100_000, "not JSON"),
        (b'{"data": {}}', "no model listed"),
        (b'{"data": [{"id": 7}]}', "no model listed"),
        (b'{"data": [{"id": ""}]}', "no model listed"),
        (b"NaN", "no model listed"),
    ],
)
def test_hostile_model_lists_are_problems_not_guesses(body, problem):
    readings, problems = ed.read_models(body, "http://e/v1/models")
    assert readings == []
    assert problem in problems[0]


def test_a_model_list_with_odd_lengths_keeps_only_the_name():
    body = json.dumps({"data": [{"id": "m" * 500, "max_model_len": -1}, {"id": "b"}]}).encode()
    readings, problems = ed.read_models(body, "u")
    assert [(r.key, len(str(r.value))) for r in readings] == [("served_model", 200)]
    assert "2 models served" in problems[0]


def test_replicas_that_disagree_are_shown_not_averaged():
    one = ed.EngineAnswer("a", readings=(ed.Reading("tp_size", 4.0, "a"),))
    two = ed.EngineAnswer("b", readings=(ed.Reading("tp_size", 8.0, "b"),))
    report = ed.merge([one, two])
    assert report.values() == {"tp_size": 4.0}
    assert "Replicas disagree on tp_size" in report.problems[0]


def test_a_server_info_that_is_not_json_is_a_problem():
    with serve({"/server_info": b"<html>"}, content_type="text/html") as base:
        readings, problems = ed.read_info("sglang", b"<html>", f"{base}/server_info")
    assert readings == []
    assert "invalid JSON" in problems[0]
