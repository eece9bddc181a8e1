"""The page shows what each check rests on: the ranking with every entry's state, score
and evidence count ("no data" where there is none), each check's span beside its window
and what it still needs, and the path to the most likely cause expanded."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from investigations import actions
from probes.models import Observation, Target, TargetKind
from tests.support import builders

# Walkthrough 1, ten seconds after the first scrape: the preemption counter has not moved.
GAUGES = {"kv_cache_usage": 0.95, "requests_running": 40, "requests_waiting": 46}
WINDOWED = {
    "ttft_p95": 1.4, "preemptions_rate": 0.0, "prompt_tokens_rate": 3000.0,
    "e2e_count_rate": 1.5, "queue_time_p95": 1.1, "queue_time_p95_lo": 1.0,
    "queue_time_p95_hi": 2.5,
}  # fmt: skip


def _open(team, commander, now, waiting: float):
    deployment = builders.deployment(team)
    engine = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://10.0.0.5/metrics",
        last_polled_at=now, last_success_at=now,
    )  # fmt: skip
    rows = []
    for n, ago in enumerate((10, 5, 0)):
        at = now - timedelta(seconds=ago)
        values = GAUGES | {"requests_waiting": waiting}
        if n:  # windowed values need two scrapes
            values |= WINDOWED | {"scrape_span_s": 10.0 - ago}
        rows += [
            Observation(target=engine, taken_at=at, signal=s, value=v) for s, v in values.items()
        ]
    Observation.objects.bulk_create(rows)
    return actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)


@pytest.fixture
def opened(team, commander, frozen_now):
    return _open(team, commander, frozen_now, waiting=46)


def _row(html: str, testid: str) -> str:
    return html.split(f'data-testid="{testid}"')[1].split("</li>")[0]


def test_the_ranking_says_state_score_and_evidence_and_no_data(opened, client_for, viewer):
    html = client_for(viewer).get(reverse("investigations:tree", args=[opened.pk])).content
    html = html.decode()
    ranking = html.split('data-testid="ranking"')[1].split("</ol>")[0]
    first = re.findall(r'data-testid="rank-([a-z-]+)"', ranking)[0]
    assert first == "kv-cache-pressure"
    top = _row(html, "rank-kv-cache-pressure")
    assert "open" in top and "suggests inconclusive" in top and "score" in top
    assert "checks with data" in top
    router = _row(html, "rank-router-latency")
    assert "no data" in router and "checks with data" not in router


def test_a_check_shows_its_span_and_what_it_still_needs(opened, client_for, viewer):
    html = client_for(viewer).get(reverse("investigations:tree", args=[opened.pk])).content
    cell = html.decode().split('data-testid="span-preemption-rate"')[1].split("</td>")[0]
    assert "2 samples over 10 s" in cell
    assert "needs ≥ 170 s more data" in cell


def test_the_path_to_the_most_likely_cause_is_expanded(
    team, commander, frozen_now, client_for, viewer
):
    """A short queue makes engine-queue's own check eliminate, and no child confirms yet
    (preemptions unknown): it suggests eliminate, yet the most likely cause is under it."""
    opened = _open(team, commander, frozen_now, waiting=3)
    html = client_for(viewer).get(reverse("investigations:tree", args=[opened.pk])).content
    html = html.decode()
    assert re.findall(r'data-testid="rank-([a-z-]+)"', html)[0] == "kv-cache-pressure"
    tags = {
        key: html.split(f'data-testid="node-{key}"')[1].split(">")[0]
        for key in ("engine-queue", "kv-cache-pressure", "kv-block-leak")
    }
    assert 'class="node node-eliminate' in html.split('data-testid="node-engine-queue"')[0][-80:]
    assert "open" in tags["engine-queue"] and "open" in tags["kv-cache-pressure"]


def test_two_confirmed_causes_show_their_shares(team, commander, frozen_now, client_for, viewer):
    """Walkthrough 1's KV storm on a replica with one rank at half its clock: both causes
    confirm, and the ranking shows how much of the alarm each explains."""
    deployment = builders.deployment(team)
    engine = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://10.0.0.5/metrics",
        last_polled_at=frozen_now, last_success_at=frozen_now,
    )  # fmt: skip
    dcgm = Target.objects.create(
        deployment=deployment, kind=TargetKind.DCGM, url="http://10.0.0.5:9400/metrics",
        last_polled_at=frozen_now, last_success_at=frozen_now,
    )  # fmt: skip
    gauges = {"kv_cache_usage": 0.94, "requests_running": 40, "requests_waiting": 47}
    windowed = {
        "ttft_p95": 1.4, "preemptions_rate": 0.5, "prompt_tokens_rate": 3000.0,
        "e2e_count_rate": 1.5, "generation_tokens_rate": 1650.0, "queue_time_p95": 3.0,
    }  # fmt: skip
    rows = []
    for n, ago in enumerate((10, 5, 0)):
        at = frozen_now - timedelta(seconds=ago)
        values = gauges | ((windowed | {"scrape_span_s": 10.0 - ago}) if n else {})
        rows += [
            Observation(target=engine, taken_at=at, signal=s, value=v) for s, v in values.items()
        ]
        for gpu, mhz in enumerate((1410, 1410, 705, 1410)):
            rows += [
                Observation(target=dcgm, taken_at=at, signal=s, labels=f"gpu={gpu}", value=v)
                for s, v in (("gpu_sm_clock_mhz", mhz), ("gpu_gpu_util_pct", 97))
            ]
    Observation.objects.bulk_create(rows)
    opened = actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)
    html = client_for(viewer).get(reverse("investigations:tree", args=[opened.pk])).content
    html = html.decode()
    pressure = _row(html, "rank-kv-cache-pressure")
    straggler = _row(html, "rank-tp-straggler")
    assert "suggests confirm" in pressure and "suggests confirm" in straggler
    assert 'data-testid="share-kv-cache-pressure"' in pressure
    assert "explains 3.000" in pressure
    assert "% of what the confirmed causes explain" in straggler
