"""Helpers the browser tests share: the stand-in beat, logging in through the form or
through the local IdP (single sign-on), finding a page section by its heading, waiting for
the tree's refresh, and the checks a page must pass in a dark room (contrast), at any width
(no horizontal scroll) and from the keyboard (focus outlines).

The checks are JavaScript run in the page and read back as plain data, so a failure names
the element, its colours and the ratio rather than a bare boolean.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from django.db import connections

from investigations.tasks import poll_and_evaluate
from tests.conftest import PASSWORD
from tests.support.oidc_provider import PASSWORD as IDP_PASSWORD

CYCLE_S = 15


def expect():
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect


class Beat:
    """Stands in for Celery beat and the worker: poll cycles run explicitly, on a thread of
    their own (the probes fetch with ``asyncio.run``, which cannot run on the thread where
    Playwright's sync API keeps its event loop). Each cycle moves the simulator and the
    virtual wall clock on by the same 15 s."""

    def __init__(self, simulator, clock, deployment) -> None:
        self.simulator, self.clock, self.deployment = simulator, clock, deployment
        self.cycles = 0
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="beat")

    def call(self, fn, *args):
        return self.thread.submit(fn, *args).result()

    def run(self, cycles: int) -> None:
        self.call(self._run, cycles)

    def stop(self) -> None:
        self.call(connections.close_all)
        self.thread.shutdown()

    def _run(self, cycles: int) -> None:
        for _ in range(cycles):
            self.simulator.advance(CYCLE_S)
            self.clock.advance(CYCLE_S)
            cycle = self.clock.now().replace(microsecond=0)
            poll_and_evaluate.apply(args=[str(self.deployment.pk), cycle.isoformat()])
            self.cycles += 1


def log_in(page, user) -> None:
    page.goto("/")
    page.get_by_label("Username").fill(user.get_username())
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect()(page.get_by_role("heading", name="Active investigations", exact=True)).to_be_visible()


def sign_in_with_sso(page, origin: str, username: str) -> None:
    """From Atlas's login page through the IdP and back; signs in at the IdP only when
    it asks (its session outlives Atlas's logout) and consents when it asks."""
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with SSO").click()
    for _ in range(4):
        page.wait_for_load_state()
        if page.url.startswith(origin):
            break
        if "/accounts/login/" in page.url:
            page.get_by_label("IdP username").fill(username)
            page.get_by_label("IdP password").fill(IDP_PASSWORD)
            page.get_by_role("button", name="Sign in to the IdP").click()
        elif "/o/authorize/" in page.url:
            page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(re.compile(re.escape(origin) + r"/($|\?)"))


def section(page, heading: str):
    return page.locator("section").filter(
        has=page.get_by_role("heading", name=re.compile(rf"^{re.escape(heading)}"))
    )


def await_tree_refresh(page) -> None:
    """Block until htmx next swaps the tree (every 5 s), so that what follows has a whole
    refresh interval to itself."""
    page.evaluate(
        """() => new Promise((resolve, reject) => {
            const done = (event) => {
                if (event.detail.target && event.detail.target.id === "tree") {
                    document.body.removeEventListener("htmx:afterSettle", done);
                    resolve();
                }
            };
            document.body.addEventListener("htmx:afterSettle", done);
            setTimeout(() => reject(new Error("the tree did not refresh in 20 s")), 20000);
        })"""
    )


def draw_every_chart(page, timeout_ms: int = 20_000) -> int:
    """Once the page has its charts (the evidence partial comes after load), scroll each
    into view in turn until plotly has drawn it (charts are drawn when they come into view,
    static/js/charts.js), then back to the top; how many there are."""
    return page.evaluate(
        """async (timeout) => {
            const until = performance.now() + timeout;
            const selector = "[data-figure], [data-chart]";
            while (!document.querySelector(selector)) {
              if (performance.now() > until) { throw new Error("no chart on the page"); }
              await new Promise((resolve) => setTimeout(resolve, 20));
            }
            const charts = [...document.querySelectorAll(selector)];
            for (let chart of charts) {
              // An htmx refresh may swap a chart not drawn yet for its twin (same id).
              const id = chart.id;
              chart.scrollIntoView({block: "center"});
              while (!chart.querySelector(".main-svg")) {
                if (performance.now() > until) { throw new Error("chart not drawn: " + id); }
                await new Promise((resolve) => setTimeout(resolve, 20));
                if (!chart.isConnected && id && document.getElementById(id)) {
                  chart = document.getElementById(id);
                  chart.scrollIntoView({block: "center"});
                }
              }
            }
            window.scrollTo(0, 0);
            return charts.length;
        }""",
        timeout_ms,
    )


def outside_origin(urls: list[str], origin: str) -> list[str]:
    """Requests to anything but the live server; ``data:`` URLs never leave the page."""
    return [
        u for u in urls if not (u == origin or u.startswith(origin + "/") or u.startswith("data:"))
    ]


def horizontal_overflow(page) -> dict | None:
    """None when the document does not scroll sideways; else the widths and the elements
    that stick out past the viewport, to say what to fix."""
    return page.evaluate(
        """() => {
            const width = window.innerWidth;
            const doc = document.documentElement.scrollWidth;
            if (doc <= width + 1) { return null; }
            const culprits = [];
            // Content inside a container that scrolls or clips (a wide table in its own
            // scroller) cannot widen the page: only what escapes one is a culprit.
            const clipped = (el) => {
                for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
                    if (["auto", "scroll", "hidden", "clip"].includes(
                            getComputedStyle(p).overflowX)) { return true; }
                }
                return false;
            };
            for (const el of document.body.querySelectorAll("*")) {
                const box = el.getBoundingClientRect();
                if (box.right > width + 1 && culprits.length < 8 && !clipped(el)) {
                    culprits.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
                                  (el.className && el.className.baseVal === undefined
                                   ? "." + String(el.className).split(" ").join(".") : "") +
                                  " right=" + Math.round(box.right));
                }
            }
            return {innerWidth: width, scrollWidth: doc, culprits: culprits};
        }"""
    )


# WCAG 2 relative luminance and contrast ratio of the colours the browser computed. A
# text's background is the composition of every ancestor's background over the body's
# (the canvas); an ancestor's opacity fades the text towards that background.
_COLOUR_JS = """
function parse(c) {
  const m = c.match(/rgba?\\(([^)]+)\\)/);
  if (!m) { return null; }
  const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
  return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
}
function over(top, bottom) {
  const a = top.a;
  return {r: top.r * a + bottom.r * (1 - a), g: top.g * a + bottom.g * (1 - a),
          b: top.b * a + bottom.b * (1 - a), a: 1};
}
function luminance(c) {
  const f = (v) => {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
}
function ratio(a, b) {
  const la = luminance(a), lb = luminance(b);
  return (Math.max(la, lb) + 0.05) / (Math.min(la, lb) + 0.05);
}
"""


def theme_report(page) -> dict:
    """The body's background luminance and its text's contrast, and every visible text
    element whose contrast with what is behind it is under 4.5:1 (WCAG AA body text)."""
    return page.evaluate(
        "() => {"
        + _COLOUR_JS
        + """
        const canvas = parse(getComputedStyle(document.body).backgroundColor);
        const bodyText = parse(getComputedStyle(document.body).color);
        function behind(el) {
          const chain = [];
          for (let e = el; e && e !== document.body; e = e.parentElement) { chain.push(e); }
          let bg = canvas, opacity = 1;
          for (const e of chain.reverse()) {
            const style = getComputedStyle(e);
            const c = parse(style.backgroundColor);
            if (c && c.a > 0) { bg = over(c, bg); }
            opacity *= Number(style.opacity);
          }
          return {bg: bg, opacity: opacity};
        }
        const low = [];
        let checked = 0;
        for (const el of document.body.querySelectorAll("*")) {
          if (el.closest("svg, option, .sr-only, script, style, template")) { continue; }
          const text = Array.from(el.childNodes)
            .filter((n) => n.nodeType === Node.TEXT_NODE)
            .map((n) => n.textContent).join("").trim();
          if (!text) { continue; }
          const style = getComputedStyle(el);
          if (style.visibility !== "visible" || !el.getClientRects().length) { continue; }
          const box = el.getBoundingClientRect();
          if (box.width < 2 || box.height < 2) { continue; }
          const {bg, opacity} = behind(el);
          const fg = parse(style.color);
          const seen = over({r: fg.r, g: fg.g, b: fg.b, a: fg.a * opacity}, bg);
          const r = ratio(seen, bg);
          checked += 1;
          if (r < 4.5) {
            const classes = String(el.className).trim().split(/\\s+/).join(".");
            const rgb = [bg.r, bg.g, bg.b].map(Math.round).join(", ");
            low.push({element: el.tagName.toLowerCase() + "." + classes,
                      text: text.slice(0, 40), color: style.color,
                      background: `rgb(${rgb})`, ratio: Math.round(r * 100) / 100});
          }
        }
        return {
          backgroundLuminance: luminance(canvas),
          bodyContrast: ratio(bodyText, canvas),
          checked: checked,
          low: low.slice(0, 20),
        };
      }"""
    )


def freeze_htmx(page) -> None:
    """Stop every htmx request (tree, charts, worker strip) and wait for those in flight,
    so the DOM holds still while the keyboard walks it."""
    page.evaluate(
        """() => new Promise((resolve) => {
            document.body.addEventListener("htmx:beforeRequest", (e) => e.preventDefault(), true);
            const quiet = () => document.querySelector(".htmx-request") === null;
            const wait = () => quiet() ? setTimeout(resolve, 300) : setTimeout(wait, 50);
            wait();
        })"""
    )


FOCUSABLE = (
    "a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), "
    "select:not([disabled]), textarea:not([disabled]), summary, [tabindex]"
)


def mark_focusable(page) -> list[str]:
    """Number every visible element the keyboard must reach (``data-walk``); their
    descriptions, in document order. Branches are opened first: what a collapsed branch
    holds is reached after opening it, and its summary is on the list."""
    return page.evaluate(
        """(selector) => {
            document.querySelectorAll("details").forEach((d) => { d.open = true; });
            const out = [];
            for (const el of document.querySelectorAll(selector)) {
              if (el.tabIndex < 0 || el.closest("[inert], [hidden]")) { continue; }
              const style = getComputedStyle(el);
              if (style.visibility !== "visible" || style.display === "none") { continue; }
              // The skip link sits off-screen until focused; it is still a Tab stop.
              if (!el.getClientRects().length) { continue; }
              el.dataset.walk = String(out.length);
              const label = el.getAttribute("aria-label") || el.id ||
                            (el.textContent || "").trim().slice(0, 30) ||
                            el.getAttribute("name") || el.getAttribute("href");
              out.push(el.tagName.toLowerCase() + " " + label);
            }
            return out;
        }""",
        FOCUSABLE,
    )


def tab_walk(page, stops: int) -> list[dict]:
    """Press Tab from the top of the page until focus comes round again (or ``stops`` Tabs
    more than expected); what each press focused and how its focus is drawn."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.evaluate("window.scrollTo(0, 0)")
    seen: list[dict] = []
    for _ in range(stops):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            """async () => {
                const el = document.activeElement;
                if (!el || el === document.body) { return null; }
                // Focus may fade a control in (plotly's mode bar): read it once settled.
                const settled = Promise.all(document.getAnimations().map((a) => a.finished));
                await Promise.race([settled.catch(() => null),
                                    new Promise((r) => setTimeout(r, 1000))]);
                const style = getComputedStyle(el);
                let opacity = 1;
                for (let e = el; e; e = e.parentElement) {
                  opacity *= Number(getComputedStyle(e).opacity);
                }
                return {walk: el.dataset.walk === undefined ? null : Number(el.dataset.walk),
                        tag: el.tagName.toLowerCase(), id: el.id, opacity: opacity,
                        outlineStyle: style.outlineStyle, outlineWidth: style.outlineWidth,
                        outlineColor: style.outlineColor};
            }"""
        )
        if focused is None:
            if seen:
                break  # past the last control: focus left the document
            continue
        if seen and focused["walk"] is not None and focused["walk"] == seen[0]["walk"]:
            break  # came round again
        seen.append(focused)
    return seen


def keyboard_problems(page) -> tuple[list[str], list[str]]:
    """Walk the page by Tab: the controls that should be reached, and what is wrong (one
    not reached; one reached without a focus outline, or faded out while focused)."""
    wanted = mark_focusable(page)
    walked = tab_walk(page, stops=len(wanted) + 40)
    reached = {stop["walk"] for stop in walked if stop["walk"] is not None}
    problems = [f"not reachable by Tab: {w}" for i, w in enumerate(wanted) if i not in reached]
    for stop in walked:
        name = wanted[stop["walk"]] if stop["walk"] is not None else stop["tag"]
        if stop["outlineStyle"] == "none" or float(stop["outlineWidth"].rstrip("px") or 0) < 1:
            problems.append(f"no focus outline on {name}: {stop}")
        if stop["opacity"] < 0.5:  # an outline drawn round something faded out is no help
            problems.append(f"focused but faded out: {name}: {stop}")
    return wanted, problems
