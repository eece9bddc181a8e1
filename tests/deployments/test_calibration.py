"""One-click calibration (issue 17): the TTFT target, ITL ceiling and prefill cost an engine
cannot report, proposed from the deployment's own stored readings over a window; too few
readings or too short a span propose nothing and say why; the commander accepts by saving.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from deployments import calibration
from deployments.calibration import (
    ITL_SIGNAL,
    MIN_SAMPLES,
    MIN_SPAN_S,
    PREFILL_TIME_SIGNAL,
    PREFILL_TOKENS_SIGNAL,
    TTFT_SIGNAL,
    propose,
    quantile,
)
from deployments.models import Deployment
from tests.support import builders

CURRENT = {"ttft_target_ms": 600.0, "itl_ceiling_ms": 150.0, "prefill_ms_per_token": 0.035}
END = 1_800_000_000.0


def _series(values: list[float], step_s: float = 60.0) -> list[tuple[float, float]]:
    """``values`` one reading every ``step_s`` up to END, oldest first."""
    return [(END - step_s * (len(values) - 1 - i), v) for i, v in enumerate(values)]


def _by_field(estimates) -> dict:
    return {e.field: e for e in estimates}


def _propose(*engines, minutes: float = 30):
    return _by_field(propose(list(engines), start=END - minutes * 60, end=END, **CURRENT))


def test_a_quiet_window_proposes_each_constant_with_its_source():
    ttft = [0.040, 0.050, 0.045, 0.055, 0.050, 0.048, 0.052, 0.050, 0.060, 0.049]  # s
    itl = [0.020] * 9 + [0.030]  # s; one slower poll in the tail
    engine = {
        TTFT_SIGNAL: _series(ttft),
        ITL_SIGNAL: _series(itl),
        PREFILL_TIME_SIGNAL: _series([0.030] * 10),  # 30 ms per request ...
        PREFILL_TOKENS_SIGNAL: _series([600.0] * 10),  # ... for 600 new tokens
    }
    out = _propose(engine)

    ttft_target = out["ttft_target_ms"]
    assert ttft_target.value == pytest.approx(500.0)  # 10 x the median 50 ms
    assert ttft_target.source.signal == TTFT_SIGNAL
    assert ttft_target.source.samples == 10 and ttft_target.source.statistic == "median"
    assert ttft_target.source.span_s == 540 and ttft_target.source.window_minutes == 30
    assert "10 x the median TTFT (50.0 ms)" in ttft_target.rule
    assert ttft_target.changes  # 600 -> 500

    itl_ceiling = out["itl_ceiling_ms"]
    tail = quantile(itl, 0.95) * 1000  # 25.5 ms
    assert itl_ceiling.value == pytest.approx(round(1.5 * tail, 1))
    assert itl_ceiling.source.statistic == "p95"

    prefill = out["prefill_ms_per_token"]
    assert prefill.value == pytest.approx(0.05)  # 30 ms / 600 tokens
    assert "upper bound" in prefill.rule


def test_replicas_are_pooled_and_prefill_pairs_readings_within_each_engine():
    # Two replicas polled at the same instants: one prefills at 0.05 ms/token, the other
    # at 0.02. Paired by instant across engines, one engine's tokens would stand for both
    # (every ratio 0.02); paired within each, the median falls between the two.
    a = {
        PREFILL_TIME_SIGNAL: _series([0.030] * 6),
        PREFILL_TOKENS_SIGNAL: _series([600.0] * 6),
        TTFT_SIGNAL: _series([0.05] * 6),
    }
    b = {
        PREFILL_TIME_SIGNAL: _series([0.030] * 6),
        PREFILL_TOKENS_SIGNAL: _series([1500.0] * 6),
        TTFT_SIGNAL: _series([0.05] * 6),
    }
    out = _propose(a, b)
    assert out["prefill_ms_per_token"].source.samples == 12
    assert out["prefill_ms_per_token"].value == pytest.approx(0.035)
    assert out["ttft_target_ms"].source.samples == 12  # 6 polls x 2 replicas


def test_too_few_readings_propose_nothing_and_say_so():
    engine = {TTFT_SIGNAL: _series([0.05] * (MIN_SAMPLES - 1))}
    out = _propose(engine)
    assert not out["ttft_target_ms"].proposed
    assert f"{MIN_SAMPLES - 1} readings" in out["ttft_target_ms"].reason
    # No readings at all (a window with no traffic) is no evidence either: no zero target.
    assert not out["itl_ceiling_ms"].proposed and "0 readings" in out["itl_ceiling_ms"].reason
    assert not out["prefill_ms_per_token"].proposed
    assert all(e.value is None for e in out.values())


def test_enough_readings_over_too_short_a_span_propose_nothing():
    engine = {ITL_SIGNAL: _series([0.02] * 30, step_s=5.0)}  # 30 polls over 145 s
    out = _propose(engine)
    assert MIN_SPAN_S > 145
    assert not out["itl_ceiling_ms"].proposed
    assert "span 145 s" in out["itl_ceiling_ms"].reason


def test_non_finite_readings_and_zero_tokens_are_not_counted():
    engine = {
        TTFT_SIGNAL: _series([float("nan")] * 10),
        PREFILL_TIME_SIGNAL: _series([0.03] * 10),
        PREFILL_TOKENS_SIGNAL: _series([0.0] * 10),  # all prompt tokens cached
    }
    out = _propose(engine)
    assert out["ttft_target_ms"].source.samples == 0 and not out["ttft_target_ms"].proposed
    assert out["prefill_ms_per_token"].source.samples == 0


def test_the_test_bed_and_the_page_share_the_rules():
    assert calibration.ttft_target_from_idle(40.0, floor_ms=500.0) == 500.0
    assert calibration.ttft_target_from_idle(80.0, floor_ms=500.0) == 800.0
    assert calibration.itl_ceiling_over_tail(20.0) == 30.0


# --- The page ---------------------------------------------------------------------------


def _form_data(deployment: Deployment, **changes) -> dict:
    data = {
        "name": deployment.name,
        "engine": deployment.engine,
        "model_name": deployment.model_name,
        "poll_interval_s": deployment.poll_interval_s,
        **dataclasses.asdict(deployment.budget),
    }
    return {**data, **changes}


@pytest.mark.django_db
def test_the_edit_page_proposes_and_only_saving_accepts(make_deployment, client_for, commander):
    deployment = make_deployment("atlas-prod")
    engine = builders.target(deployment)
    now = timezone.now()
    builders.observations(
        engine,
        {TTFT_SIGNAL: 0.045, ITL_SIGNAL: 0.040, PREFILL_TIME_SIGNAL: 0.02},
        at=now - timedelta(seconds=5),
        count=20,
        step_s=30.0,
    )
    builders.observations(
        engine, {PREFILL_TOKENS_SIGNAL: 500.0}, at=now - timedelta(seconds=5), count=20
    )  # polled at other instants than the prefill time below: pairs only where both are
    builders.observations(  # an incident an hour ago, outside the window: not read
        engine, {TTFT_SIGNAL: 9.0}, at=now - timedelta(hours=1), count=20
    )
    client = client_for(commander)
    url = reverse("deployments:edit", args=[deployment.pk])

    page = client.get(url, {"calibrate": "15"})
    assert page.status_code == 200
    body = page.content.decode()
    assert 'data-testid="calibration-proposals"' in body
    assert "From the last 15 minutes" in body
    rows = dict(page.context["calibrated"]["estimates"])
    ttft = rows["TTFT target (ms)"]
    assert ttft.value == pytest.approx(450.0)  # 10 x 45 ms; the 9 s incident is outside
    assert ttft.source.samples == 20 and ttft.source.signal == TTFT_SIGNAL
    assert rows["ITL ceiling (ms)"].value == pytest.approx(60.0)  # 1.5 x 40 ms
    # The prefill readings: 20 time means, 20 token means at 15 s steps; paired where the
    # instants meet (every other token reading), 10 over 270 s: too short a span.
    prefill = rows["Prefill cost (ms per token)"]
    assert not prefill.proposed and "span" in prefill.reason
    assert "No proposal:" in body and "20 over 570 s" in body
    form = page.context["form"]
    assert form.initial["ttft_target_ms"] == pytest.approx(450.0)
    assert form.initial["prefill_ms_per_token"] == deployment.prefill_ms_per_token
    assert 'value="450.0"' in body  # filled into the form ...
    deployment.refresh_from_db()
    assert deployment.ttft_target_ms == 600.0  # ... and not saved

    saved = client.post(url, _form_data(deployment, ttft_target_ms=450.0, itl_ceiling_ms=60.0))
    assert saved.status_code == 302
    deployment.refresh_from_db()
    assert (deployment.ttft_target_ms, deployment.itl_ceiling_ms) == (450.0, 60.0)


@pytest.mark.django_db
def test_a_deployment_with_no_readings_gets_reasons_not_values(
    make_deployment, client_for, commander
):
    deployment = make_deployment("quiet")
    page = client_for(commander).get(
        reverse("deployments:edit", args=[deployment.pk]), {"calibrate": "nonsense"}
    )
    assert page.status_code == 200
    assert page.context["calibrated"]["minutes"] == 30  # the default window
    assert not page.context["calibrated"]["any"]
    assert "Nothing to propose" in page.content.decode()
    assert page.context["form"].initial.get("ttft_target_ms") in (None, 600.0)
