"""A realistic, closed investigation to write postmortems about.

Walkthrough 1 of the seed on "atlas-prod": p95 TTFT over target because the KV cache is
full. The record is made with the domain actions (open, decide with the evidence the
evaluation showed at that moment, record the fix, close after a passing verification)
over stored observations; each row is then moved to the minute it happened, so the
timeline reads like an incident rather than one test-run instant.

    T0-10m  observations start (normal)    T0+9m   confirm engine-queue
    T0-3m   the storm starts               T0+10m  confirm kv-cache-pressure
    T0      opened by the commander        T0+15m  fix: fewer max-num-seqs
    T0+30s  alarm firing                   T0+16m  the storm ends
    T0+4m   eliminate router-latency       T0+17m  alarm clear
    T0+6m   eliminate prefill-slow         T0+35m  closed, verification passing
    T0+8m   eliminate kv-block-leak
"""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest

from investigations import actions, live
from investigations.evidence import frozen_evidence
from investigations.models import Decision, FixRecord, Investigation, TimelineEvent
from probes.models import Observation, TargetKind
from tests.conftest import require_service
from tests.support import builders

STEP_S = 30
NORMAL = {
    "ttft_p95": 0.35,
    "kv_cache_usage": 0.70,
    "preemptions_rate": 0.0,
    "requests_waiting": 3,
    "requests_running": 28,
    "e2e_count_rate": 10.0,
    "prompt_tokens_rate": 25_000.0,
    "generation_tokens_rate": 3_000.0,
    "prefill_time_mean": 0.2,
    "queue_time_p95": 0.05,
}
STORM = {
    **NORMAL,
    "ttft_p95": 1.4,
    "kv_cache_usage": 0.94,
    "preemptions_rate": 0.08,
    "requests_waiting": 20,
    "requests_running": 40,
    "e2e_count_rate": 12.0,
    "prompt_tokens_rate": 30_000.0,
    "generation_tokens_rate": 3_600.0,
    "queue_time_p95": 0.9,
}
DECISIONS = [
    (4, "router-latency", "eliminate", "Router p95 is 4 ms, far under 20 ms"),
    (6, "prefill-slow", "eliminate", "Prefill is on budget; the slow part is re-prefill"),
    (8, "kv-block-leak", "eliminate", "Running requests account for the KV usage"),
    (9, "engine-queue", "confirm", "20 waiting against a normal 3-8"),
    (10, "kv-cache-pressure", "confirm", "KV at 94 % with preemptions climbing"),
]


@pytest.fixture
def t0(frozen_now):
    return frozen_now - timedelta(minutes=60)


def _latest_event(investigation, when) -> None:
    """Date what the last action wrote at ``when``: its event and any that followed it (a
    confirmed cause or a fix moves the status too). Written now (the frozen clock, after
    every ``when`` here), so they are the only events later than ``when``."""
    TimelineEvent.objects.filter(investigation=investigation, at__gt=when).update(at=when)


def _alarm(investigation, when, firing: bool, measured: float) -> None:
    verb = "firing" if firing else "clear"
    event = TimelineEvent.objects.create(
        investigation=investigation,
        kind="alarm",
        summary=f"Alarm {verb}: {measured:.4g} against 0.6",
        data={"firing": firing, "measured": measured, "threshold": 0.6},
    )
    TimelineEvent.objects.filter(pk=event.pk).update(at=when)


@pytest.fixture
def deployment(make_deployment):
    return make_deployment(model_name="atlas-140b")


@pytest.fixture
def observations(deployment, t0):
    engine = builders.target(deployment)
    prom = builders.target(deployment, TargetKind.PROMETHEUS, "http://10.0.0.9:9090")
    storm = (t0 - timedelta(minutes=3), t0 + timedelta(minutes=16))
    rows = []
    at = t0 - timedelta(minutes=10)
    while at <= t0 + timedelta(minutes=50):
        values = STORM if storm[0] <= at < storm[1] else NORMAL
        rows += [
            Observation(target=engine, taken_at=at, signal=s, value=v) for s, v in values.items()
        ]
        rows.append(Observation(target=prom, taken_at=at, signal="router_forward_p95", value=0.004))
        at += timedelta(seconds=STEP_S)
    Observation.objects.bulk_create(rows)
    return engine


@pytest.fixture
def open_incident(deployment, observations, commander, responder, t0) -> Investigation:
    """Opened, decided, fixed; not closed yet."""
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )
    Investigation.objects.filter(pk=investigation.pk).update(opened_at=t0)
    _latest_event(investigation, t0)
    investigation.refresh_from_db()
    _alarm(investigation, t0 + timedelta(seconds=30), True, 1.4)
    for minutes, node, action, reason in DECISIONS:
        when = t0 + timedelta(minutes=minutes)
        shown = live.current_state(investigation, now=when).result.find(node)
        decision = actions.decide(
            investigation=investigation,
            node=node,
            action=action,
            reason=reason,
            user=responder if node != "kv-cache-pressure" else commander,
            evidence=frozen_evidence(shown),
            expected_state="open",
        )
        Decision.objects.filter(pk=decision.pk).update(decided_at=when)
        _latest_event(investigation, when)
    fix_at = t0 + timedelta(minutes=15)
    planned = live.current_state(investigation, now=fix_at).result.find("kv-cache-pressure").fix
    fix = actions.record_fix(
        investigation=investigation,
        node="kv-cache-pressure",
        parameters=dict(planned.parameters),
        user=commander,
        note="Rolled max-num-seqs on all four replicas",
    )
    FixRecord.objects.filter(pk=fix.pk).update(applied_at=fix_at)
    _latest_event(investigation, fix_at)
    _alarm(investigation, t0 + timedelta(minutes=17), False, 0.35)
    investigation.refresh_from_db()
    return investigation


@pytest.fixture
def incident(open_incident, commander, t0, frozen_now, time_machine) -> Investigation:
    """The closed investigation: verification passed at close (the close judges it, as
    of the moment it closes, so the clock is moved there and back)."""
    closed_at = t0 + timedelta(minutes=35)
    time_machine.move_to(closed_at, tick=False)
    actions.close_investigation(investigation=open_incident, user=commander)
    time_machine.move_to(frozen_now, tick=False)
    open_incident.refresh_from_db()
    assert open_incident.closed_at == closed_at
    assert open_incident.closing_facts["verification"]["state"] == "passing"
    return open_incident


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def need_poppler() -> None:
    if not (shutil.which("pdftotext") and shutil.which("pdfimages")):
        require_service("poppler-utils", "pdftotext/pdfimages are not installed")


def need_weasyprint():
    """``postmortems.pdf``, or a skip (locally) / failure (CI) when WeasyPrint cannot load
    Pango: it dlopens the library at import and raises OSError without it."""
    try:
        from postmortems import pdf
    except OSError as exc:
        require_service(
            "WeasyPrint",
            f"Pango cannot be loaded ({type(exc).__name__}; "
            "apt-get install libpango-1.0-0 libpangoft2-1.0-0)",
        )
    return pdf
