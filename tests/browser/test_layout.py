"""The key pages at a 13-inch laptop's 1280x800 and a large monitor's 2560x1440, in real
headless Chromium: no sideways scrolling, a dark theme whose text keeps a 4.5:1 contrast
with whatever it sits on, every control of the investigation page reachable by Tab and
drawn with a focus outline when reached, and not one request leaving the live server.

The record behind the pages is made the way production makes it: an ``itl-spikes``
investigation on a manual-clock simulator polled for eight cycles (so the tree is
evaluated and the evidence charts have points), one branch eliminated; a ``kv-pressure``
drill started on a drill range (a second simulator, switched through /control/scenario),
decided and finished, so its result page marks branches. Screenshots of every page at
both sizes (``ATLAS_SCREENSHOTS=1`` copies them to ``var/screenshots/``).
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from atlas_console.management.commands.bootstrap_demo import register_drill_range
from drills import actions as drill_actions
from investigations import actions
from tests.browser.conftest import Simulator
from tests.browser.support import (
    Beat,
    draw_every_chart,
    expect,
    freeze_htmx,
    horizontal_overflow,
    keyboard_problems,
    log_in,
    outside_origin,
    theme_report,
)
from tests.support import builders

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SIZES = ((390, 844), (1280, 800), (2560, 1440))  # a phone, a laptop, a 27" screen
MAX_BACKGROUND_LUMINANCE = 0.05  # #0f1216 is 0.006; a light theme's is above 0.8
ELIMINATE_REASON = "SM clocks are at the full 1,410 MHz on every rank; nothing is throttled"


@pytest.fixture
def deployment(make_deployment, simulator):
    deployment = make_deployment("atlas-sim", model_name="atlas-140b")
    builders.targets(deployment, simulator.base)
    return deployment


@pytest.fixture
def beat(simulator, clock, deployment):
    beat = Beat(simulator, clock, deployment)
    try:
        yield beat
    finally:
        beat.stop()


@pytest.fixture
def drill_simulator():
    sim = Simulator("healthy")
    try:
        yield sim
    finally:
        sim.server.stop()


@pytest.fixture
def record(team, commander, deployment, beat, simulator, clock, drill_simulator):
    """The investigation, evaluated and charted, and a finished drill; the pages to visit."""
    investigation = actions.open_investigation(
        deployment=deployment,
        symptom="itl-spikes",
        user=commander,
        title="p99 ITL spikes on atlas-sim",
    )
    simulator.advance(120)
    clock.advance(120)
    beat.run(8)
    actions.decide(
        investigation=investigation,
        node="gpu-throttling",
        action="eliminate",
        reason=ELIMINATE_REASON,
        user=commander,
        evidence={},
    )
    drill_range = register_drill_range(team, drill_simulator.base)
    drill = drill_actions.start_drill(
        drill_range=drill_range, choice="kv-pressure", user=commander, seed=11
    )
    for node, action in (("router-latency", "eliminate"), ("prefill-slow", "confirm")):
        actions.decide(
            investigation=drill.investigation,
            node=node,
            action=action,
            reason="practice",
            user=commander,
            evidence={},
        )
    drill_actions.finish_drill(drill=drill, user=commander)
    return {
        "home": reverse("home"),
        "investigation": reverse("investigations:detail", args=[investigation.pk]),
        "postmortem": reverse("postmortems:detail", args=[investigation.pk]),
        "review-list": reverse("review:list") + "?q=clocks",
        "team-stats": reverse("review:stats"),
        "drill-result": reverse("drills:detail", args=[drill.pk]),
        "deployment": reverse("investigations:deployment", args=[deployment.pk]),
    }


def _ready(page, name: str) -> None:
    """Wait for what each page draws after load."""
    check = expect()
    if name == "investigation":
        # Charts are drawn as they come into view: scroll through them all, so the checks
        # and screenshots below see the page with every chart drawn.
        draw_every_chart(page)
        check(page.locator("#evidence .main-svg").first).to_be_visible()
        check(page.get_by_test_id("node-gpu-throttling").locator("summary")).to_contain_text(
            "eliminated"
        )
    elif name == "review-list":
        check(page.get_by_test_id("review-results")).to_contain_text("p99 ITL spikes")
    elif name == "drill-result":
        check(page.get_by_test_id("drill-branches").locator("[data-mark]").first).to_be_visible()
    page.wait_for_load_state("networkidle")


def _keyboard_problems(page) -> list[str]:
    """Every control reached by Tab, each with a visible focus outline."""
    freeze_htmx(page)
    wanted, problems = keyboard_problems(page)
    assert len(wanted) > 20, wanted  # the tree's forms, the fix form, the uploads ...
    return problems


def test_key_pages_fit_both_screens_dark_and_keyboard_usable(
    page, live_server, requests_seen, screenshots, commander, record
):
    log_in(page, commander)
    problems: list[str] = []
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        for name, url in record.items():
            where = f"{name} at {width}x{height}"
            page.goto(url)
            _ready(page, name)
            overflow = horizontal_overflow(page)
            if overflow is not None:
                problems.append(f"{where} scrolls sideways: {overflow}")
            theme = theme_report(page)
            if theme["backgroundLuminance"] > MAX_BACKGROUND_LUMINANCE:
                problems.append(f"{where} is not dark: {theme['backgroundLuminance']:.3f}")
            if theme["bodyContrast"] < 4.5 or theme["low"]:
                problems.append(
                    f"{where} body text {theme['bodyContrast']:.1f}:1; under 4.5:1: {theme['low']}"
                )
            assert theme["checked"] > 10, where  # the contrast check saw the page's text
            screenshots.take(page, f"{name}-{width}x{height}")
            if name == "investigation":
                problems += [f"{where}: {p}" for p in _keyboard_problems(page)]
    assert problems == [], "\n".join(problems)
    assert len(screenshots.taken) == len(SIZES) * len(record)
    # Not one request left the live server (data: URLs never leave the page).
    assert requests_seen.urls
    assert outside_origin(requests_seen.urls, live_server.url) == []


BAD_PAGE = """<!doctype html><html><head><style>
  body { background: #fff; color: #777; margin: 0; }
  .wide { width: 3000px; height: 4px; }
  button { outline: none; }
  .faded { opacity: 0; }
</style></head><body>
  <p>Grey text on white, just under 4.5:1</p><div class="wide"></div>
  <a href="#a">a link</a> <button>no outline</button>
  <span class="faded"><a href="#b">faded</a></span>
  <details><summary>closed branch</summary><a href="#c">inside</a></details>
</body></html>"""


def test_the_checks_catch_what_they_look_for(chromium):
    """The same checks on a page built to fail each one: they must say so."""
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.set_content(BAD_PAGE)
        overflow = horizontal_overflow(page)
        assert overflow is not None and overflow["scrollWidth"] >= 3000
        assert any(c.startswith("div.wide") for c in overflow["culprits"]), overflow
        theme = theme_report(page)
        assert theme["backgroundLuminance"] == 1.0
        low = {item["text"]: item["ratio"] for item in theme["low"]}
        assert 4.4 < low["Grey text on white, just under 4.5:1"] < 4.5, low
        assert low["faded"] == 1.0, low  # opacity 0: invisible
        assert "a link" not in low  # Chromium's default link blue is 9.4:1 on white
        wanted, problems = keyboard_problems(page)
        assert wanted == [
            "a a link",
            "button no outline",
            "a faded",
            "summary closed branch",
            "a inside",
        ]
        assert [p.split(":")[0] for p in problems] == [
            "no focus outline on button no outline",
            "focused but faded out",
        ], problems
        page.set_content("<p>nothing to focus</p><div hidden><a href='#x'>hidden</a></div>")
        assert keyboard_problems(page) == ([], [])
    finally:
        context.close()
    origin = "http://127.0.0.1:1"
    assert outside_origin(
        [origin, f"{origin}/static/x.css", "data:,", "http://127.0.0.1:12/", "https://cdn.x/y.js"],
        origin,
    ) == ["http://127.0.0.1:12/", "https://cdn.x/y.js"]
