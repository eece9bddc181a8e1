"""Engine controllers: "Apply fix" on a deployment Atlas runs itself (the demo's simulator,
a drill range) sends the fix to the engine's control endpoint with the console's token,
and records it (once) only when the engine took it; production deployments keep "Record
fix as applied", and Atlas changes nothing there.

Against a real manual-clock enginesim on 127.0.0.1 that requires the control token."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest
from django.urls import reverse
from django.utils import timezone

from deployments.models import ControllerKind, EngineController
from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from investigations import actions, controllers, live
from investigations.evaluation import FixPlan
from investigations.evidence import frozen_evidence
from investigations.models import FixRecord, Investigation, TimelineEvent
from tests.support import builders

TOKEN = "console-only-token"
STORM = {
    "ttft_p95": 1.4, "kv_cache_usage": 0.94, "preemptions_rate": 0.08, "requests_waiting": 20,
    "requests_running": 40, "e2e_count_rate": 10.0, "prompt_tokens_rate": 25_000.0,
    "generation_tokens_rate": 3_000.0, "prefill_time_mean": 0.2, "itl_p99": 0.2,
}  # fmt: skip
CAUSE = "kv-cache-pressure"


@pytest.fixture
def sim(settings) -> Iterator[SimServer]:
    settings.ATLAS_SIM_CONTROL_TOKEN = TOKEN
    server = SimServer(
        SimDeployment("kv-pressure", clock=SimClock("manual")), control_token=TOKEN
    ).start_in_thread()
    yield server
    server.stop()


def _truth(server: SimServer) -> dict:
    request = urllib.request.Request(  # noqa: S310 - loopback simulator
        f"{server.base_url}/control/truth", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
        return json.loads(response.read())


@pytest.fixture
def confirmed(db, make_deployment, commander):
    """An open high-TTFT investigation whose KV-pressure cause a commander confirmed."""
    deployment = make_deployment("atlas-sim")
    # Ten cycles of the storm, so the fix's parameter (from the average context) is known.
    engine = builders.target(deployment, "engine", "http://127.0.0.1:9/metrics")
    builders.observations(engine, STORM, at=timezone.now(), count=10)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )
    node = live.current_state(investigation).result.find(CAUSE)
    actions.decide(
        investigation=investigation,
        node=CAUSE,
        action="confirm",
        reason="KV at 97 % with preemptions climbing",
        user=commander,
        evidence=frozen_evidence(node),
    )
    return investigation


def _controlled(investigation: Investigation, url: str, **fields) -> EngineController:
    return EngineController.objects.create(
        deployment=investigation.deployment, kind=ControllerKind.ENGINESIM, url=url, **fields
    )


PLAN = FixPlan("lower-max-num-seqs", "Lower max-num-seqs", {"max_num_seqs": 28.0}, {
    "max_num_seqs": 28.0
}, "vllm serve ...")  # fmt: skip


@pytest.mark.django_db
def test_apply_fix_sends_it_to_the_simulator_and_writes_it_on_the_timeline(
    sim, confirmed, commander
):
    _controlled(confirmed, sim.base_url)
    fix, applied = controllers.apply_and_record(
        investigation=confirmed, node=CAUSE, plan=PLAN, user=commander
    )
    assert applied is not None and applied.sent == {"max_num_seqs": 28}  # an int, not 28.0
    truth = _truth(sim)
    assert [f["changes"] for f in truth["fixes"]] == [{"max_num_seqs": 28}]
    assert truth["engines"][0]["config"]["max_num_seqs"] == 28 and truth["fix_applied"]
    event = TimelineEvent.objects.get(investigation=confirmed, kind="fix")
    assert event.summary == (
        f"Applied {fix.key} for {CAUSE} (max_num_seqs=28) "
        f"through enginesim at {sim.base_url} (max_num_seqs=28)"
    )
    assert event.data["applied_through"] == applied.summary


@pytest.mark.django_db
def test_a_fix_is_recorded_once(sim, confirmed, commander):
    _controlled(confirmed, sim.base_url)
    controllers.apply_and_record(investigation=confirmed, node=CAUSE, plan=PLAN, user=commander)
    with pytest.raises(ValueError, match=f"the fix for {CAUSE} is already recorded"):
        controllers.apply_and_record(investigation=confirmed, node=CAUSE, plan=PLAN, user=commander)
    # Refused before the engine was asked: the simulator got the fix once.
    assert len(_truth(sim)["fixes"]) == 1
    # The action itself refuses too (two people clicking at once both pass the pre-check).
    with pytest.raises(ValueError, match="already recorded"):
        actions.record_fix(
            investigation=confirmed, node=CAUSE, parameters={"max_num_seqs": 28}, user=commander
        )
    assert FixRecord.objects.count() == 1


@pytest.mark.django_db
def test_the_page_offers_the_fix_once_and_says_apply_only_where_atlas_runs_the_engine(
    sim, confirmed, commander, client_for
):
    client = client_for(commander)
    page = reverse("investigations:detail", args=[confirmed.pk])
    html = client.get(page).content.decode()
    assert "Record fix as applied" in html and "Apply fix<" not in html  # production
    _controlled(confirmed, sim.base_url)
    html = client.get(page).content.decode()
    assert "Apply fix</button>" in html and "Record fix as applied" not in html
    node = live.current_state(confirmed).result.find(CAUSE)
    form = {"node": CAUSE, **{f"param.{k}": repr(v) for k, v in node.fix.parameters.items()}}
    url = reverse("investigations:record_fix", args=[confirmed.pk])
    first = client.post(url, form, follow=True)
    assert "Fix applied through enginesim" in first.content.decode()
    assert 'data-testid="fix-recorded"' in first.content.decode()
    assert "Apply fix</button>" not in first.content.decode()
    second = client.post(url, form, follow=True)
    assert f"the fix for {CAUSE} is already recorded" in second.content.decode()
    assert FixRecord.objects.count() == 1 and len(_truth(sim)["fixes"]) == 1


@pytest.mark.django_db
def test_a_simulator_that_refuses_leaves_nothing_recorded(sim, confirmed, commander, settings):
    _controlled(confirmed, sim.base_url)
    settings.ATLAS_SIM_CONTROL_TOKEN = "not-the-token"
    with pytest.raises(controllers.ControllerError, match=r"HTTP 401"):
        controllers.apply_and_record(investigation=confirmed, node=CAUSE, plan=PLAN, user=commander)
    assert not FixRecord.objects.exists()
    assert not TimelineEvent.objects.filter(kind="fix").exists()
    assert _truth(sim)["fixes"] == []


@pytest.mark.django_db
def test_a_controller_url_outside_the_allowed_networks_is_never_contacted(confirmed, commander):
    _controlled(confirmed, "http://169.254.169.254")
    with pytest.raises(controllers.ControllerError, match="link-local, metadata"):
        controllers.apply_and_record(investigation=confirmed, node=CAUSE, plan=PLAN, user=commander)
    assert not FixRecord.objects.exists()


@pytest.mark.parametrize(
    ("apply", "sent"),
    [
        ({"max_num_seqs": 28.0}, {"max_num_seqs": 28}),
        (
            {"enable_chunked_prefill": 1.0, "max_num_batched_tokens": 512.0},
            {"enable_chunked_prefill": True, "max_num_batched_tokens": 512},
        ),
        ({"enforce_eager": 1.0}, {"enforce_eager": True}),
        ({"kv_leak_fraction": 0.0}, {"kv_leak_fraction": 0.0}),
    ],
)
def test_fix_settings_become_the_simulators_types(apply, sent):
    changed = controllers.enginesim_changes(apply)
    assert changed == sent
    assert all(type(changed[k]) is type(v) for k, v in sent.items())


@pytest.mark.parametrize(
    ("apply", "error"),
    [
        ({"max_num_seqs": 27.5}, "not a whole number"),
        ({"enforce_eager": 2.0}, "not a yes/no setting"),
        ({"tensor_parallel_size": 8.0}, "cannot apply 'tensor_parallel_size'"),
        ({}, "names no engine setting"),
    ],
)
def test_settings_the_simulator_cannot_take_are_refused(apply, error):
    with pytest.raises(controllers.ControllerError, match=error):
        controllers.enginesim_changes(apply)


def test_the_clock_in_words_is_wall_time():
    live_view = controllers.describe_clock(
        {
            "loop_s": 1200,
            "loop": 3,
            "phase_s": 250,
            "incident_in_progress": True,
            "incident_ends_in_s": 310,
            "speed": 1.0,
        }
    )
    assert live_view.live and live_view.headline == "Incident in progress for about 5 min 10 s more"
    assert live_view.detail == "loop 3, 4 min 10 s into a 20 min 00 s cycle"
    quiet = controllers.describe_clock(
        {"loop_s": 1200, "loop": 1, "phase_s": 0, "incident_starts_in_s": 200, "speed": 10.0}
    )
    assert not quiet.live and quiet.headline == "Quiet: the next incident starts in 20 s"
    over = controllers.describe_clock({"sim_time_s": 900, "incident_starts_in_s": None})
    assert over.headline == "No incident to come"


@pytest.mark.django_db
def test_the_clock_shows_for_the_demo_never_for_a_drill_range(sim, make_deployment, client_for,
                                                               commander):  # fmt: skip
    demo = make_deployment("atlas-sim")
    drill = make_deployment("drill-range")
    builders.targets(demo, sim.base_url)
    EngineController.objects.create(
        deployment=demo, kind=ControllerKind.ENGINESIM, url=sim.base_url, shows_clock=True
    )
    EngineController.objects.create(
        deployment=drill, kind=ControllerKind.ENGINESIM, url=sim.base_url, shows_clock=False
    )
    client = client_for(commander)
    clock = client.get(reverse("investigations:simulator_clock", args=[demo.pk]))
    assert clock.status_code == 200
    assert "Quiet: the next incident starts in" in clock.content.decode()
    page = client.get(reverse("investigations:deployment", args=[demo.pk])).content.decode()
    assert 'data-testid="sim-clock-panel"' in page
    assert client.get(reverse("investigations:simulator_clock", args=[drill.pk])).status_code == 404
    page = client.get(reverse("investigations:deployment", args=[drill.pk])).content.decode()
    assert "sim-clock" not in page
