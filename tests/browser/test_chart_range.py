"""The evidence charts' time-range control (issue 17), in real Chromium.

Every time chart shows its check's window (15 minutes before the open to now); the control
above them cuts every drawn chart to the last 5 or 15 minutes or an hour of that window, and
back, without a round trip. The spans are read from each drawn chart's own x axis."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations import actions
from tests.browser.support import Beat, draw_every_chart, log_in
from tests.support import builders

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SPANS = """() => [...document.querySelectorAll("[data-figure][data-drawn]")]
    .filter((el) => el._fullLayout && el._fullLayout.xaxis.type === "date")
    .map((el) => {
      const [a, b] = el._fullLayout.xaxis.range.map((t) => new Date(t.replace(" ", "T") + "Z"));
      return (b - a) / 1000;
    })"""


@pytest.fixture
def investigation(make_deployment, simulator, clock, commander):
    deployment = make_deployment("atlas-sim", model_name="atlas-140b")
    builders.targets(deployment, simulator.base)
    beat = Beat(simulator, clock, deployment)
    try:
        investigation = actions.open_investigation(
            deployment=deployment, symptom="itl-spikes", user=commander, title="ITL spikes"
        )
        simulator.advance(120)
        clock.advance(120)
        beat.run(6)
        yield investigation
    finally:
        beat.stop()


def test_the_range_control_cuts_every_drawn_chart_and_restores_the_window(
    page, commander, investigation
):
    log_in(page, commander)
    page.goto(reverse("investigations:detail", args=[investigation.pk]))
    assert draw_every_chart(page) >= 2
    whole = page.evaluate(SPANS)
    assert whole and min(whole) > 900  # the window starts 15 minutes before the open

    page.get_by_role("button", name="5 min", exact=True).click()
    assert (
        page.get_by_role("button", name="5 min", exact=True).get_attribute("aria-pressed") == "true"
    )
    cut = page.evaluate(SPANS)
    assert len(cut) == len(whole)
    assert all(abs(span - 300) < 1 for span in cut), cut

    page.get_by_role("button", name="whole window").click()
    assert page.evaluate(SPANS) == pytest.approx(whole, abs=1)
