"""The investigation page during an incident: the budget panel, the probe strip, evidence
cards (refreshed only when the record changed), a confirmed cause that stays first, the
gate's backtest up to the fix, and that backtest cached per poll cycle."""

from __future__ import annotations

import json
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from deployments.budget import Budget
from investigations import actions, live
from investigations.evaluation import expected_values
from investigations.evidence import frozen_evidence
from investigations.models import Decision, FixRecord, Investigation, TimelineEvent
from investigations.panels import budget_rows
from probes.models import Observation, Target, TargetKind
from tests.support import builders

NORMAL = {
    "ttft_p95": 0.35, "kv_cache_usage": 0.70, "preemptions_rate": 0.0, "requests_waiting": 3,
    "requests_running": 28, "e2e_count_rate": 10.0, "prompt_tokens_rate": 25_000.0,
    "generation_tokens_rate": 3_000.0, "prefill_time_mean": 0.2, "itl_p99": 0.05,
}  # fmt: skip
STORM = {
    **NORMAL, "ttft_p95": 1.4, "kv_cache_usage": 0.94, "preemptions_rate": 0.08,
    "requests_waiting": 20, "requests_running": 40, "itl_p99": 0.2,
}  # fmt: skip


def _series(values: dict, at: float) -> list:
    return [(at, v) for v in values.values()]


def _view(values: dict, now: float) -> dict:
    return {("engine", s): [("target=e", [(now - 10, v), (now, v)])] for s, v in values.items()}


def test_the_budget_panel_flags_what_is_out_of_range():
    now = 10_000.0
    budget = Budget()
    storm = _view({**STORM, "prefill_time_mean": 3.0}, now)
    rows = {
        r.title: r for r in budget_rows(budget, storm, now, expected_values(budget, storm, now))
    }
    occupancy = rows["KV occupancy"]
    assert occupancy.observed == 0.94 and occupancy.flagged and occupancy.observed_text == "94.0 %"
    # 40 running x (2,500 prompt + 150 output) of 114,688 tokens.
    assert occupancy.expected == pytest.approx(40 * (2500 + 150) / 114_688)
    assert rows["Queue depth"].flagged and rows["Queue depth"].expected_text == "3 to 8 waiting"
    assert rows["ITL p99 vs the mixed-step ceiling"].flagged  # 200 ms over 45 + 17.9 ms
    prefill = rows["Prefill cost per prompt token"]
    assert prefill.observed == pytest.approx(3000 / 2500) and prefill.flagged
    assert rows["KV capacity per rank"].expected_text == "114,688 tokens"
    assert not rows["KV capacity per rank"].flagged  # no engine reports its capacity here
    calm = _view(NORMAL, now)
    rows = budget_rows(budget, calm, now, expected_values(budget, calm, now))
    assert not any(r.flagged for r in rows)
    assert budget_rows(budget, {}, now, expected_values(budget, {}, now))[1].observed_text == "—"


@pytest.fixture
def now(frozen_now):
    return frozen_now


@pytest.fixture
def incident(team, commander, now):
    """high-ttft on atlas-prod: opened 25 minutes ago as the KV storm began; the cause
    confirmed and its fix applied three minutes in (inside the rule's for: 5m); the storm
    ended with the fix."""
    t0 = now - timedelta(minutes=25)
    fix_at = t0 + timedelta(minutes=3)
    deployment = builders.deployment(team)
    engine = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://10.0.0.5/metrics",
        last_polled_at=now, last_success_at=now,
    )  # fmt: skip
    Target.objects.create(
        deployment=deployment, kind=TargetKind.DCGM, url="http://10.0.0.5:9400/metrics",
        last_polled_at=now, last_error_at=now, consecutive_failures=4,
        last_error_kind="http_status", last_error="HTTP 503 from dcgm-exporter",
    )  # fmt: skip
    rows, at = [], t0 - timedelta(minutes=20)
    while at <= now:
        values = STORM if t0 <= at < fix_at else NORMAL
        rows += [
            Observation(target=engine, taken_at=at, signal=s, value=v) for s, v in values.items()
        ]
        at += timedelta(seconds=15)
    Observation.objects.bulk_create(rows)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander, title="TTFT over target"
    )
    Investigation.objects.filter(pk=investigation.pk).update(opened_at=t0, last_evaluated_at=now)
    investigation.refresh_from_db()
    shown = live.current_state(investigation, now=t0 + timedelta(minutes=2)).result
    decision = actions.decide(
        investigation=investigation, node="kv-cache-pressure", action="confirm",
        reason="KV at 94 % with preemptions", user=commander,
        evidence=frozen_evidence(shown.find("kv-cache-pressure")),
    )  # fmt: skip
    Decision.objects.filter(pk=decision.pk).update(decided_at=t0 + timedelta(minutes=2))
    alarm = TimelineEvent.objects.create(
        investigation=investigation,
        kind="alarm",
        summary="Alarm firing: 1.4 against 0.6",
        data={"firing": True, "measured": 1.4, "threshold": 0.6},
    )
    TimelineEvent.objects.filter(pk=alarm.pk).update(at=t0 + timedelta(seconds=30))
    actions.record_fix(
        investigation=investigation, node="kv-cache-pressure", parameters={"max_num_seqs": 28},
        user=commander,
    )  # fmt: skip
    FixRecord.objects.filter(investigation=investigation).update(applied_at=fix_at)
    return investigation


def _queries(client, url) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as context:
        response = client.get(url)
    assert response.status_code == 200
    return len(context), response.content.decode()


def test_a_confirmed_cause_stays_first_with_its_fix_when_evidence_turns(
    incident, client_for, commander
):
    state = live.current_state(incident)
    node = state.result.find("kv-cache-pressure")
    assert node.state == "confirmed" and node.suggestion == "eliminate"
    assert state.result.ranking[0] == "kv-cache-pressure"
    html = client_for(commander).get(reverse("investigations:detail", args=[incident.pk]))
    html = html.content.decode()
    ranking = html[html.index('class="ranking"') :]
    assert ranking.index("kv-cache-pressure") < ranking.index("router-latency")
    assert "the evidence now suggests eliminate" in ranking
    # Its fix is recorded: the page says so, and offers no second record.
    assert "Suggested fix: Lower max-num-seqs" in html and 'data-testid="fix-recorded"' in html
    assert "Record fix as applied" not in html
    # The confirmed branch stays open in the tree, though its evidence suggests eliminate.
    assert 'data-testid="node-kv-cache-pressure" open' in html


def test_the_gate_would_not_have_fired_when_the_fix_came_within_its_for(
    incident, client_for, commander
):
    gate = live.current_state(incident).gate
    # The checks held for three minutes before the fix; windowed reads remember the storm
    # for five more, which must not count as the rule firing after the fix.
    assert gate["backtest"].fired_at is None
    assert 150 <= gate["backtest"].held_s <= 180
    html = client_for(commander).get(reverse("investigations:detail", args=[incident.pk]))
    assert "the promoted signal would not have fired: it had held for 1" in html.content.decode()
    assert "short of the rule's for: 5m" in html.content.decode()


def test_the_gate_replay_is_cached_per_poll_cycle(incident, client_for, commander, now):
    client = client_for(commander)
    url = reverse("investigations:tree", args=[incident.pk])
    cold, first = _queries(client, url)
    warm, second = _queries(client, url)
    # No targets or observations read for the replay, and the page's own observation
    # read is reused (nothing was stored since).
    assert warm == cold - 3
    assert "would not have fired" in first and "would not have fired" in second
    Investigation.objects.filter(pk=incident.pk).update(
        last_evaluated_at=now + timedelta(seconds=5)
    )
    assert _queries(client, url)[0] == warm + 2  # a new cycle: replayed once more


def test_the_probe_strip_and_budget_panel_are_on_the_page(incident, client_for, viewer):
    html = client_for(viewer).get(reverse("investigations:tree", args=[incident.pk]))
    html = html.content.decode()
    strip = html.split('data-testid="probe-strip"')[1].split("</div>")[0]
    assert "answering" in strip and "failing 4x" in strip
    assert "http_status: HTTP 503 from dcgm-exporter" in strip
    panel = html.split('data-testid="budget-panel"')[1].split("</section>")[0]
    assert "KV occupancy" in panel and "70.0 %" in panel and "in range" in panel
    # The tree refresh carries the timeline out of band (it sits lower on the page).
    assert '<div id="timeline" hx-swap-oob="true">' in html and "Opened from symptom" in html


def _figures(body: str) -> dict:
    """Chart id -> figure, from the data-figure attributes charts.js reads."""
    out = {}
    for part in body.split('<div class="chart" id="chart-')[1:]:
        name = part.split('"')[0]
        out[name] = json.loads(unescape(part.split('data-figure="')[1].split('"')[0]))
    return out


def test_evidence_cards_chart_each_check_with_thresholds_and_the_record(
    incident, client_for, viewer, outsider, commander
):
    url = reverse("investigations:evidence", args=[incident.pk])
    response = client_for(viewer).get(url)
    body = response.content.decode()
    figures = _figures(body)
    checks = [c.id for n in live.current_state(incident).playbook.walk() for c in n.checks]
    # Nothing stored (no router metrics, queue histogram, dcgm or gc log): no chart drawn.
    unrecorded = {
        "router-forward-p95",
        "queue-wait-p95",
        "ttft-sm-clock-spread",
        "ttft-gc-pause-max",
        "clocks-at-full",
    }
    assert set(figures) == {"alarm", *checks} - unrecorded
    card = body.split('data-testid="card-router-latency"')[1].split("</article>")[0]
    assert "Nothing recorded for this signal" in card
    kv = figures["kv-usage"]
    (trace,) = kv["data"]
    assert max(trace["y"]) == 0.94 and min(trace["y"]) == 0.7
    lines = {a["text"] for a in kv["layout"]["annotations"]}
    assert {"confirm >= 90 %", "eliminate < 80 %"} <= lines  # KV usage reads as %
    assert {"confirm kv-cache-pressure", "fix fewer-max-num-seqs"} <= lines
    start, end = kv["layout"]["xaxis"]["range"]
    assert (end - start) / 1000 == 40 * 60  # 15 min lead + 25 min, on a frozen clock
    alarm = figures["alarm"]
    assert "alarm > 0.6 s" in {a["text"] for a in alarm["layout"]["annotations"]}
    # Unchanged: 204, and htmx leaves the charts alone. A decision changes the record.
    version = body.split('name="v" value="')[1].split('"')[0]
    assert client_for(viewer).get(url, {"v": version}).status_code == 204
    actions.decide(
        investigation=incident, node="router-latency", action="eliminate", reason="4 ms",
        user=commander, evidence={},
    )  # fmt: skip
    again = client_for(viewer).get(url, {"v": version})
    assert again.status_code == 200
    refreshed = _figures(again.content.decode())
    assert "eliminate router-latency" in {
        a["text"] for a in refreshed["alarm"]["layout"]["annotations"]
    }
    # On another node's chart the decision is context: a faint line, no label.
    kv_marks = [s["x0"] for s in refreshed["kv-usage"]["layout"]["shapes"] if s["xref"] == "x"]
    t0 = incident.opened_at.timestamp()
    assert kv_marks == [round((t0 + dt) * 1000) for dt in (30, 120, 180)] + [kv_marks[-1]]
    assert "alarm firing" in {a["text"] for a in refreshed["kv-usage"]["layout"]["annotations"]}
    assert client_for(outsider).get(url).status_code == 404
