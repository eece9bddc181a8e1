"""Who may start and finish drills, one drill per range, and a simulator that is wrong,
unreachable, slow, huge or somewhere probes may not go."""

from __future__ import annotations

import http.server
import re
import socket
import threading
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from deployments.models import EngineController
from drills import actions, simctl
from drills.models import Drill, DrillRange
from investigations.models import Investigation
from probes.policy import fetch_policy


def _start(client, drill_range, scenario="gc-pauses"):
    return client.post(reverse("drills:start", args=[drill_range.pk]), {"scenario": scenario})


def test_a_viewer_is_refused_and_an_outsider_never_sees_the_range(
    client_for, viewer, outsider, drill_range, simulator
):
    assert _start(client_for(viewer), drill_range).status_code == 403
    assert _start(client_for(outsider), drill_range).status_code == 404
    assert not Drill.objects.exists()
    assert simulator.truth()["scenario"] == "healthy"


def test_finishing_and_reading_follow_the_team_roles(
    client_for, commander, viewer, outsider, drill_range, simulator
):
    drill = actions.start_drill(drill_range=drill_range, choice="tp-straggler", user=commander)
    detail = reverse("drills:detail", args=[drill.pk])
    finish = reverse("drills:finish", args=[drill.pk])
    assert client_for(outsider).get(detail).status_code == 404
    assert client_for(outsider).post(finish).status_code == 404
    client = client_for(viewer)
    page = client.get(detail)
    assert page.status_code == 200 and "tp-straggler" not in page.content.decode()
    assert b"Finish drill" not in page.content
    assert client.post(finish).status_code == 403
    assert client.get(reverse("drills:list")).status_code == 200
    drill.refresh_from_db()
    assert drill.finished_at is None
    foreign = client_for(outsider).get(reverse("drills:list")).content.decode()
    assert str(drill.pk) not in foreign and str(drill_range.pk) not in foreign


def test_one_drill_at_a_time_per_range(client_for, responder, commander, drill_range, simulator):
    _start(client_for(responder), drill_range, "gc-pauses")
    response = _start(client_for(commander), drill_range, "kv-pressure")
    assert response.status_code == 302 and response["Location"] == reverse("drills:list")
    messages = [str(m) for m in response.wsgi_request._messages]
    assert any("already running on drill-range" in m for m in messages), messages
    assert Drill.objects.count() == 1 and Investigation.objects.count() == 1
    assert simulator.truth()["scenario"] == "gc-pauses"  # the running drill is untouched
    with pytest.raises(actions.DrillBusy):
        actions.start_drill(drill_range=drill_range, choice="random", user=commander)


def test_an_unknown_scenario_from_a_hand_made_form_is_refused(client_for, responder, drill_range):
    response = _start(client_for(responder), drill_range, "router-slow")
    assert response.status_code == 302
    assert not Drill.objects.exists()
    with pytest.raises(ValueError, match="not a drill scenario"):
        actions.start_drill(drill_range=drill_range, choice="healthy+gc-pauses", user=responder)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_simulator_leaves_nothing_behind(client_for, responder, team):
    drill_range = DrillRange.objects.create(
        team=team,
        deployment=team.deployments.create(name="drill-range"),
        simulator_url=f"http://127.0.0.1:{_free_port()}",
    )
    response = _start(client_for(responder), drill_range)
    messages = [str(m) for m in response.wsgi_request._messages]
    assert any("cannot reach the simulator" in m for m in messages), messages
    assert not Drill.objects.exists() and not Investigation.objects.exists()


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("http://169.254.169.254", "link-local, metadata"),  # never contacted
        ("http://10.0.0.5:8101", "outside the allowed networks"),
        ("https://127.0.0.1:8101", "must be http://"),  # enginesim serves no TLS
        ("file:///etc/passwd", "is not http/https"),
    ],
)
def test_urls_probes_may_not_reach_are_refused_before_connecting(url, error):
    with pytest.raises(simctl.SimulatorError, match=re.escape(error)):
        simctl.switch_scenario(url, "gc-pauses", 1, fetch_policy())


class _Hostile(http.server.BaseHTTPRequestHandler):
    mode = "huge"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.mode == "slow":
            threading.Event().wait(5)
            return
        body = {
            "huge": b"[" + b"1," * (simctl.MAX_ANSWER_BYTES) + b"1]",
            "not-json": b"<html>hello</html>",
            "wrong-scenario": b'{"scenario": "healthy", "causes": []}',
            "error": b'{"error": "unknown scenario"}',
        }[self.mode]
        self.send_response(400 if self.mode == "error" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator:
    servers = []

    def serve(mode: str) -> str:
        handler = type("Handler", (_Hostile,), {"mode": mode})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("huge", "exceeds"),
        ("not-json", "not JSON"),
        ("wrong-scenario", "did not confirm"),
        ("error", r"refused the switch \(HTTP 400\): unknown scenario"),
    ],
)
def test_a_lying_or_huge_answer_is_an_error_not_a_drill(hostile, mode, error):
    with pytest.raises(simctl.SimulatorError, match=error):
        simctl.switch_scenario(hostile(mode), "gc-pauses", 1, fetch_policy())


def test_a_simulator_that_never_answers_costs_one_bounded_error(hostile, settings):
    settings.ATLAS_PROBE_TIMEOUT = 0.5
    with pytest.raises(simctl.SimulatorError, match=r"did not answer within 0\.5 s"):
        simctl.switch_scenario(hostile("slow"), "gc-pauses", 1, fetch_policy())


@pytest.mark.django_db
def test_bootstrap_demo_registers_the_drill_range_idempotently():
    for _ in range(2):
        call_command(
            "bootstrap_demo",
            "--sim-url", "http://127.0.0.1:8100/",
            "--drill-sim-url", "http://127.0.0.1:8101/",
            stdout=StringIO(),
        )  # fmt: skip
    drill_range = DrillRange.objects.select_related("deployment").get()
    assert drill_range.simulator_url == "http://127.0.0.1:8101"
    assert drill_range.deployment.name == "drill-range"
    # Both simulators are engines Atlas runs ("Apply fix" applies there); only the demo's
    # shows its incident clock (a drill range's timing is the drill's ground truth).
    controllers = {
        c.deployment.name: (c.url, c.shows_clock)
        for c in EngineController.objects.select_related("deployment")
    }
    assert controllers == {
        "atlas-sim": ("http://127.0.0.1:8100", True),
        "drill-range": ("http://127.0.0.1:8101", False),
    }
    assert drill_range.deployment.team == drill_range.team
    urls = set(drill_range.deployment.targets.values_list("url", flat=True))
    assert "http://127.0.0.1:8101/metrics" in urls and len(urls) == 6
