"""The investigation page shows the log lines that looked like errors and matched no event
(why zero counts stay inconclusive), read by the real log probe from a real excerpt."""

from __future__ import annotations

from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from investigations import actions
from probes import observe
from probes.models import Poll, Target, TargetKind
from probes.parsing.logevents import FollowerState
from tests.support import builders
from tests.support.samples import SAMPLES, samples_absent

REAL = SAMPLES / "real" / "vllm_logs"

pytestmark = pytest.mark.skipif(samples_absent(REAL), reason="shared real samples absent")


@pytest.mark.django_db
def test_unrecognised_log_lines_are_on_the_page(team, commander, client_for):
    deployment = builders.deployment(team, "gpt-oss")
    now = timezone.now()
    log = Target.objects.create(
        deployment=deployment, kind=TargetKind.LOG_HTTP, url="http://127.0.0.1:9/logs",
        last_polled_at=now, last_success_at=now,
    )  # fmt: skip
    data = (REAL / "v1_gptoss_h100_engine_core_init_failed.log").read_bytes()
    _, seen = observe.observe_log(FollowerState(), data, now)
    Poll.objects.create(
        target=log, cycle_at=now - timedelta(seconds=5), ok=True, snapshot=seen.snapshot
    )
    investigation = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=commander, title="engine will not start"
    )
    page = client_for(commander).get(reverse("investigations:detail", args=[investigation.id]))
    text = unescape(page.content.decode())
    assert 'data-testid="unrecognised-log-lines"' in text
    assert "Engine core initialization failed" in text
    assert "cause of death not in the log" in text


@pytest.mark.django_db
def test_no_panel_when_every_line_was_recognised(team, commander, client_for):
    deployment = builders.deployment(team, "healthy")
    now = timezone.now()
    log = Target.objects.create(
        deployment=deployment, kind=TargetKind.LOG_HTTP, url="http://127.0.0.1:9/logs"
    )
    data = (REAL / "v1_2026_mtp_kv96_waiting43.log").read_bytes()
    _, seen = observe.observe_log(FollowerState(), data, now)
    Poll.objects.create(target=log, cycle_at=now, ok=True, snapshot=seen.snapshot)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=commander, title="check"
    )
    page = client_for(commander).get(reverse("investigations:detail", args=[investigation.id]))
    assert "unrecognised-log-lines" not in page.content.decode()
