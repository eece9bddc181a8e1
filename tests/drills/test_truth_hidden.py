"""The drill range does not reveal its scenario to the trainee. The trainee can read the
range's URL (its probe targets are on the deployment page), so the simulator answers
/control/ (truth, clock, fix, scenario, advance) only with the console's control token,
and its index names no scenario; the console never shows a drill range's clock."""

from __future__ import annotations

import pytest
from django.urls import reverse

from deployments.models import ControllerKind
from drills.models import Drill

pytestmark = pytest.mark.django_db


def test_a_trainee_who_knows_the_ranges_url_cannot_read_the_drills_truth(
    client_for, responder, drill_range, simulator
):
    client = client_for(responder)
    response = client.post(reverse("drills:start", args=[drill_range.pk]), {"scenario": "random"})
    assert response.status_code == 302
    drill = Drill.objects.get()
    # The console switched the range with its token: the simulator runs the drill's incident.
    assert simulator.truth()["scenario"] == drill.scenario
    # The trainee reads the range's URL off the deployment page ...
    page = client.get(reverse("investigations:deployment", args=[drill_range.deployment.pk]))
    assert simulator.base in page.content.decode()
    # ... but without the token the simulator tells them nothing of the incident.
    for method, path in [
        ("GET", "/control/truth"),
        ("GET", "/control/clock"),
        ("GET", "/replicas/0/control/truth"),
        ("POST", "/control/scenario"),
        ("POST", "/control/fix"),
    ]:
        status, body = simulator.call(method, path, {"scenario": "healthy"}, token=None)
        assert status == 401, (method, path)
        assert drill.scenario not in str(body)
    status, index = simulator.call("GET", "/", token=None)
    assert status == 200 and "scenario" not in index
    assert drill.scenario not in str(index)
    # The range is a controlled engine (Apply fix goes there) that never shows its clock.
    controller = drill_range.deployment.controller
    assert controller.kind == ControllerKind.ENGINESIM and not controller.shows_clock
    clock_url = reverse("investigations:simulator_clock", args=[drill_range.deployment.pk])
    assert client.get(clock_url).status_code == 404
    assert "sim-clock" not in page.content.decode()
