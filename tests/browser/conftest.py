"""Real headless Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright against
pytest-django's ``live_server``, a manual-clock simulator, and a virtual wall clock.

No browser is ever downloaded: Playwright launches the system Chromium. Without it (or
without the ``playwright`` package) the tests skip locally and fail in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from tests.conftest import require_service
from tests.support.oidc_provider import idp, sso_on  # noqa: F401 - fixtures (test_sso_login)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chromium():
    """One browser per module; each test gets its own context (cookies, storage)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require_service("Chromium", "the playwright package is not installed")
    if not os.access(CHROMIUM, os.X_OK):
        require_service("Chromium", f"{CHROMIUM} is missing (apt-get install chromium)")
    # Playwright's sync API keeps an asyncio loop running in this thread between calls, so
    # Django's async-safety check would refuse the test's own ORM calls (and pytest-django's
    # flush). Nothing here is async: the test thread only talks to Chromium synchronously.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Requests:
    """Every URL the page asked for, to prove nothing leaves the live server."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def outside(self, origin: str) -> list[str]:
        return [u for u in self.urls if not (u == origin or u.startswith(origin + "/"))]


@pytest.fixture
def requests_seen() -> Requests:
    return Requests()


@pytest.fixture
def page(chromium, live_server, requests_seen):
    context = chromium.new_context(
        base_url=live_server.url,
        viewport={"width": 1366, "height": 900},
        color_scheme="dark",
        accept_downloads=True,
    )
    context.set_default_timeout(15_000)
    tab = context.new_page()
    tab.on("request", lambda request: requests_seen.urls.append(request.url))
    # Chromium reports every Content-Security-Policy refusal on the console; a page that
    # needs one (an inline style, a script) is broken for real users, so no test may see one.
    refused: list[str] = []
    tab.csp_refused = refused  # a test that set_content()s its own HTML clears what it caused
    tab.on(
        "console",
        lambda message: (
            refused.append(f"{tab.url} ({message.location['url']}): {message.text}")
            if "Content Security Policy" in message.text
            else None
        ),
    )
    try:
        yield tab
    finally:
        context.close()
    assert not refused, "CSP refusals:\n" + "\n".join(refused)


class VirtualClock:
    """The wall clock the whole process (test thread and live server alike) reads through
    ``django.utils.timezone.now``: real time plus an offset that only the test moves.

    The product stamps a fix ``applied_at = now`` and every page evaluates at ``now``, so a
    ten-minute verification window cannot be covered by cycle times alone; instead the
    clock starts in the past and each simulated poll cycle moves it (and the simulator) on
    by the same 15 s. It ticks with real time in between, so rows still get distinct,
    ordered timestamps.
    """

    def __init__(self, start_offset: timedelta) -> None:
        self._real = timezone.now
        self.offset = start_offset

    def now(self) -> datetime:
        return self._real() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch) -> VirtualClock:
    virtual = VirtualClock(start_offset=-timedelta(minutes=40))
    monkeypatch.setattr(timezone, "now", virtual.now)
    return virtual


class Simulator:
    """A manual-clock ``enginesim`` serving real vLLM and dcgm-exporter endpoints;
    ``loop_s`` repeats its traffic (the demo), ``token`` closes /control/ to anyone
    without it (as ``./atlas demo`` runs it); the helpers here send it."""

    def __init__(self, scenario: str, *, loop_s: float | None = None, token: str = "") -> None:
        from enginesim.deployment import Deployment as SimDeployment
        from enginesim.deployment import SimClock
        from enginesim.server import SimServer

        self.token = token
        self.server = SimServer(
            SimDeployment(scenario, seed=0, clock=SimClock("manual"), loop_s=loop_s),
            control_token=token or None,
        ).start_in_thread()
        self.base = f"http://127.0.0.1:{self.server.ports['main']}"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def post(self, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else b""
        request = urllib.request.Request(  # noqa: S310 - loopback
            self.base + path, data=data, method="POST", headers=self._headers()
        )
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
            return json.loads(response.read())

    def get(self, path: str) -> dict:
        request = urllib.request.Request(self.base + path, headers=self._headers())  # noqa: S310
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
            return json.loads(response.read())

    def advance(self, seconds: float) -> None:
        self.post(f"/control/advance?seconds={seconds}")


@pytest.fixture
def simulator(request) -> Iterator[Simulator]:
    sim = Simulator(request.param if hasattr(request, "param") else "long-prefill-itl")
    try:
        yield sim
    finally:
        sim.server.stop()


class Screenshots:
    """Full-page PNGs under the test's tmp path; copied to ``var/screenshots/`` in the
    repository when ``ATLAS_SCREENSHOTS`` is set."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.copy_to = (
            REPO_ROOT / "var" / "screenshots" if os.environ.get("ATLAS_SCREENSHOTS") else None
        )
        self.taken: list[Path] = []

    def take(self, page, name: str) -> Path:
        path = self.folder / f"{len(self.taken) + 1:02d}-{name}.png"
        page.evaluate("window.scrollTo(0, 0)")  # else the sticky top bar lands mid-page
        page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)
        if self.copy_to is not None:
            self.copy_to.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, self.copy_to / path.name)
        return path


@pytest.fixture
def screenshots(tmp_path) -> Screenshots:
    return Screenshots(tmp_path / "screenshots")
