"""`manage.py diagnose` against the simulator over real HTTP: no worker, no database."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer

# Each diagnose runs its cycles on the real clock (1 s apart): seconds per test.
pytestmark = pytest.mark.slow


@pytest.fixture
def simulate():
    servers = []

    def start(scenario: str, speed: float = 20.0) -> str:
        # Realtime at 20x: consecutive scrapes a fraction of a second apart span seconds of
        # simulated traffic, enough for windowed quantiles.
        sim = SimDeployment(scenario, seed=0, clock=SimClock("realtime", speed))
        server = SimServer(sim).start_in_thread()
        servers.append(server)
        return f"http://127.0.0.1:{server.ports['main']}"

    yield start
    for server in servers:
        server.stop()


def _diagnose(symptom: str, *args: str, cycles: int = 4) -> dict:
    out = StringIO()
    call_command(
        "diagnose", "--symptom", symptom, *args, "--interval", "1", "--cycles", str(cycles),
        "--json", stdout=out,
    )  # fmt: skip
    return json.loads(out.getvalue())


def test_oversized_chunks_rank_first_with_their_fix(simulate):
    base = simulate("long-prefill-itl")
    report = _diagnose(
        "itl-spikes", "--engine", f"{base}/metrics", "--dcgm", f"{base}/dcgm/metrics",
        "--log", f"{base}/logs",
    )  # fmt: skip
    assert report["alarm"]["firing"] is True
    assert report["root_cause"] == "oversized-prefill-chunks"
    chunks = next(h for h in report["hypotheses"] if h["key"] == "oversized-prefill-chunks")
    by_check = {c["check"]: c for c in chunks["evidence"]}
    assert by_check["engine-chunk-budget"]["measured"] == 8192  # its start-up line
    assert by_check["output-batch-p99"]["outcome"] == "confirm"  # batches that big
    assert report["fix"]["parameters"]["max_num_batched_tokens"] == 512
    straggler = next(h for h in report["hypotheses"] if h["key"] == "tp-straggler")
    assert straggler["suggestion"] == "eliminate"
    assert straggler["evidence"][0]["measured"] < 0.05


def test_without_the_log_a_v1_engines_metrics_rank_oversized_chunks_but_confirm_nothing(simulate):
    """V1's /metrics count each prompt whole where its first token comes out: they cannot
    tell 4,096-token steps from chunked ones. Ranked first on its prior, never confirmed."""
    base = simulate("long-prefill-itl")
    report = _diagnose(
        "itl-spikes", "--engine", f"{base}/metrics", "--dcgm", f"{base}/dcgm/metrics"
    )
    assert report["ranking"][0] == "oversized-prefill-chunks"
    assert report["root_cause"] is None


def test_a_throttled_rank_ranks_first(simulate):
    base = simulate("tp-straggler")
    report = _diagnose(
        "itl-spikes", "--engine", f"{base}/metrics", "--dcgm", f"{base}/dcgm/metrics"
    )
    assert report["ranking"][0] == "tp-straggler"
    assert report["root_cause"] == "tp-straggler"


def test_kv_pressure_ranks_first_for_high_ttft(simulate):
    # The ramp builds KV pressure over ~200 simulated seconds: run the simulator at 60x.
    base = simulate("kv-pressure", speed=60.0)
    report = _diagnose(
        "high-ttft", "--engine", f"{base}/metrics", "--log", f"{base}/logs", cycles=5
    )
    assert report["ranking"][0] == "kv-cache-pressure"
    # Prefill under a preemption storm is re-prefill as much as prefill: held back (its
    # veto), neither confirmed nor ruled out on muddied evidence.
    prefill = next(h for h in report["hypotheses"] if h["key"] == "prefill-slow")
    assert prefill["suggestion"] == "inconclusive"
    # The router has no evidence here (no Prometheus): inconclusive, never eliminated.
    router = next(h for h in report["hypotheses"] if h["key"] == "router-latency")
    assert router["suggestion"] == "inconclusive"


def test_an_unreachable_endpoint_is_reported_not_fatal(simulate):
    report = _diagnose("itl-spikes", "--engine", "http://127.0.0.1:9/metrics")
    assert report["root_cause"] is None
    assert report["probe_errors"]["http://127.0.0.1:9/metrics"]
    assert all(h["suggestion"] != "eliminate" for h in report["hypotheses"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--symptom", "no-such-symptom", "--engine", "http://127.0.0.1:9/"], "no playbook"),
        (["--symptom", "itl-spikes"], "at least one"),
        (["--symptom", "itl-spikes", "--engine", "file:///etc/passwd"], "scheme"),
        (["--symptom", "itl-spikes", "--engine", "http://u:p@127.0.0.1/"], "credentials"),
        (["--symptom", "itl-spikes", "--engine", "http://127.0.0.1:9/", "--cycles", "0"], "cycles"),
    ],
)
def test_bad_arguments_are_refused(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("diagnose", *args, stdout=StringIO())


def test_a_deployment_file_sets_the_budget(tmp_path, simulate):
    base = simulate("healthy")
    path = tmp_path / "deployment.yaml"
    path.write_text("itl_ceiling_ms: 40\n")  # below the 45 ms decode step: always alarming
    report = _diagnose("itl-spikes", "--engine", f"{base}/metrics", "--deployment", str(path))
    assert report["alarm"]["threshold"] == 0.04
    bad = tmp_path / "bad.yaml"
    bad.write_text("colour: blue\n")
    with pytest.raises(CommandError, match="unknown constants colour"):
        call_command(
            "diagnose", "--symptom", "itl-spikes", "--engine", f"{base}/metrics",
            "--deployment", str(bad), stdout=StringIO(),
        )  # fmt: skip
