"""The fix a person is shown is the one recorded, and it holds still.

``max_num_seqs`` comes from the average context *now* (KV usage x capacity / running): the
running count moves by a few requests every cycle, and so did the suggested seat count.
Each rule has a case built for it: the stable window and its hysteresis (pure), the page
and the record agreeing across poll cycles whose raw values differ, a form showing a
value that is no longer current being refused, and the command naming the deployment's
model and TP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from deployments.models import Deployment
from investigations import actions, fixplans, live
from investigations.cycle import evaluate_after_poll
from investigations.models import FixRecord, Investigation
from probes.models import Observation, Target, TargetKind

# Running requests at successive cycles: noise around 40, then a real, lasting drop to 30.
RUNNING = [40, 37, 43, 38, 42, 41, 39, 30, 30, 30, 30]
NODE = "kv-cache-pressure"


def test_the_shown_value_is_the_median_of_recent_cycles_and_moves_only_past_the_band():
    raw = [28, 30, 26, 29, 27, 28, 31, 27, 21, 21, 21, 21]
    stored, shown = None, []
    for value in raw:
        stored = fixplans.settle(stored, {"max_num_seqs": value})
        shown.append(stored["shown"]["max_num_seqs"])
    assert shown[:8] == [28] * 8  # every raw value differed from the last; the shown did not
    assert len(set(raw[:8])) == 6
    # A lasting change: the third cycle of it moves the median of five, and the shown value.
    assert shown[8:] == [28, 28, 21, 21]
    assert stored["recent"]["max_num_seqs"] == [27, 21, 21, 21, 21]
    assert all(v in raw for v in shown)  # the lower median: always a value seen


def test_a_value_that_cannot_be_computed_keeps_its_history():
    stored = fixplans.settle(None, {"max_num_seqs": 28})
    assert fixplans.settle(stored, {"max_num_seqs": float("nan")}) == stored


def test_the_command_names_the_deployments_model_and_tp():
    command = "vllm serve <model> --tensor-parallel-size <tp> --max-num-seqs 28"
    assert fixplans.command_for(command, model="meta-llama/Llama-3.1-70B", tp_size=4) == (
        "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4 --max-num-seqs 28"
    )
    # A model not configured stays a placeholder to fill in, never a guess.
    assert fixplans.command_for(command, model="", tp_size=2).startswith("vllm serve <model> ")


@pytest.fixture
def incident(team, commander, frozen_now):
    deployment = Deployment.objects.create(
        team=team, name="atlas-prod", model_name="meta-llama/Llama-3.1-70B", tp_size=4
    )
    engine = Target.objects.create(
        deployment=deployment, kind=TargetKind.ENGINE, url="http://10.0.0.5/metrics"
    )
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )
    actions.decide(
        investigation=investigation, node=NODE, action="confirm", reason="KV full",
        user=commander, evidence={},
    )  # fmt: skip
    return investigation, engine


def _cycle(investigation, engine, at, running: int) -> None:
    Observation.objects.bulk_create(
        Observation(target=engine, taken_at=at, signal=s, value=v)
        for s, v in (("kv_cache_usage", 0.94), ("requests_running", running), ("ttft_p95", 1.4))
    )
    evaluate_after_poll(investigation.deployment_id, at)


def _shown(investigation, at):
    fresh = Investigation.objects.get(pk=investigation.pk)
    return live.current_state(fresh, now=at, gate=False).result.find(NODE).fix


def _raw(investigation, at):
    fresh = Investigation.objects.get(pk=investigation.pk)
    return live.current_state(fresh, now=at, gate=False, stable=False).result.find(NODE).fix


@pytest.mark.django_db
def test_the_page_shows_one_value_across_cycles_and_the_record_keeps_it(
    incident, client_for, commander, frozen_now
):
    investigation, engine = incident
    start = frozen_now - timedelta(seconds=5 * len(RUNNING))
    raw, shown = [], []
    for n, running in enumerate(RUNNING[:7]):
        at = start + timedelta(seconds=5 * n)
        _cycle(investigation, engine, at, running)
        raw.append(_raw(investigation, at).parameters["max_num_seqs"])
        shown.append(_shown(investigation, at).parameters["max_num_seqs"])
    assert len(set(raw)) >= 4, raw  # the raw suggestion moved with every refresh
    assert len(set(shown)) == 1, (raw, shown)  # the shown one did not
    fix = _shown(investigation, at)
    assert fix.apply == {"max_num_seqs": shown[-1]}
    assert fix.command.startswith("vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4")
    assert f"--max-num-seqs {shown[-1]:g}" in fix.command
    # The page's form carries the value it shows; recording it keeps exactly that value.
    client = client_for(commander)
    page = client.get(reverse("investigations:detail", args=[investigation.id])).content.decode()
    assert f'name="param.max_num_seqs" value="{shown[-1]!r}"' in page
    client.post(
        reverse("investigations:record_fix", args=[investigation.id]),
        {"node": NODE, "param.max_num_seqs": repr(shown[-1])},
    )
    assert FixRecord.objects.get().parameters == {"max_num_seqs": shown[-1]}


@pytest.mark.django_db
def test_a_form_showing_a_value_no_longer_current_is_refused(
    incident, client_for, commander, frozen_now
):
    investigation, engine = incident
    start = frozen_now - timedelta(seconds=5 * len(RUNNING))
    for n, running in enumerate(RUNNING):
        _cycle(investigation, engine, start + timedelta(seconds=5 * n), running)
    current = _shown(investigation, start + timedelta(seconds=5 * (len(RUNNING) - 1)))
    seats = current.parameters["max_num_seqs"]
    stale = seats - 5  # what the page showed before the running count dropped
    response = client_for(commander).post(
        reverse("investigations:record_fix", args=[investigation.id]),
        {"node": NODE, "param.max_num_seqs": repr(stale)},
        follow=True,
    )
    assert not FixRecord.objects.exists()
    text = response.content.decode()
    assert "The suggested fix changed since this page was loaded" in text
    assert f"max_num_seqs {stale!r} -&gt; {seats:g}" in text
