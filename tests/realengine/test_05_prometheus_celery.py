"""Incident 5 and the real Celery path, on one real KV-pressure storm.

A real Prometheus (Debian's package, its own port and storage under tmp_path) scrapes the
real engine from before the storm. Two deployments watch the same engine, each through
the product as deployed: a real worker and beat on a private Redis, the test database
shared, investigations opened by the product's action (``actions.open_investigation``)
*after* the storm started, with nothing open before:

- ``via-prometheus`` has only a ``prometheus`` target (an engine Atlas cannot reach
  directly): opening installs the playbook's PromQL and the engine signals Prometheus
  stands in for (``probes.engine_promql``), and the worker backfills each window from
  range queries. Its KV check must rest on samples from before the open, and
  ``kv-cache-pressure`` must lead within two poll cycles.
- ``direct`` has an ``engine`` target on the engine's ``/metrics`` (the light cadence's
  store-only polls before the open, its own grid after): the beat-driven
  ``poll_and_evaluate`` cycles must rank ``kv-cache-pressure`` first within two cycles.

What each cycle decided is the worker's own record (the investigation's
``last_suggestions``, read as it changes); the ranking is the evaluation replayed at that
cycle (``live.current_state``, what the worker ran).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from datetime import datetime

from deployments.models import Deployment
from investigations import live
from investigations.models import Investigation
from probes.models import Observation, Poll, Target, TargetKind
from realengine import EngineFlags
from realengine.calibrate import tiny_budget
from realengine.sizing import kv_pressure_load
from tests.realengine.conftest import ROOT, record, ttft_target_ms
from tests.realengine.incidents import Load
from tests.support.prometheus import prometheus, query, wait_for_series
from tests.support.services import (
    celery_beat_args,
    celery_worker_args,
    product_env,
    product_process,
    tail,
)
from tests.support.workers import database_url

CPU_DEFAULT_SEQS = 128
POLL_S = 5  # the deployments' poll grid once an investigation is open
LIGHT_S = 10  # the light cadence before (store-only)
SCRAPE = "2s"
STORM_BEFORE_OPEN_S = 40  # the storm Prometheus (and the light polls) see before the open
CYCLES = 2  # kv-cache-pressure leads within these (issue 15's "first within two cycles")
WATCHED = 4  # and the worker confirms it within these (a veto in doubt may hold it back)
STORM_TIMEOUT_S = 240  # the load's warm-up is sized from the calibration (20-60 s seen)
CYCLES_TIMEOUT_S = 240  # four 5 s cycles, on a 2-core machine the engine saturates
OPEN_TIMEOUT_S = 120  # a Django start on the busy machine
LOGS = ("worker", "beat")


def _storm(prom: str) -> dict | None:
    """KV nearly full and real preemptions, as Prometheus saw them; None before."""
    kv = query(prom, "max(vllm:kv_cache_usage_perc)")
    preempted = query(prom, "sum(vllm:num_preemptions_total)")
    if not kv or not preempted:
        return None
    usage, count = float(kv[0]["value"][1]), float(preempted[0]["value"][1])
    return {"kv": usage, "preemptions": count} if usage >= 0.9 and count > 0 else None


class Watch:
    """The worker's verdict per evaluated cycle of each investigation, read as it changes."""

    def __init__(self, investigations: dict[str, Investigation]) -> None:
        self.investigations = investigations
        self.cycles: dict[str, list[tuple[datetime, dict]]] = {k: [] for k in investigations}

    def poll(self) -> None:
        for name, investigation in self.investigations.items():
            row = Investigation.objects.values("last_evaluated_at", "last_suggestions").get(
                pk=investigation.pk
            )
            at, seen = row["last_evaluated_at"], self.cycles[name]
            if at is not None and at > investigation.opened_at and (not seen or seen[-1][0] != at):
                seen.append((at, row["last_suggestions"]))

    def done(self) -> bool:
        return all(len(c) >= WATCHED for c in self.cycles.values())


OPEN = """
import json, os
from django.contrib.auth import get_user_model
from deployments.models import Deployment
from investigations import actions
wanted = json.loads(os.environ["REALENGINE_OPEN"])
user = get_user_model().objects.get(pk=wanted.pop("_user"))
print(json.dumps({name: str(actions.open_investigation(
    deployment=Deployment.objects.get(pk=pk), symptom="high-ttft", user=user).pk)
    for name, pk in wanted.items()}))
"""


def _open_in_product(environment: dict, deployments: dict, user) -> dict[str, Investigation]:
    """Open one investigation per deployment with the product's action, in a process
    configured as the web is (its broker is the worker's): the backfill the open sends
    after its commit reaches the real worker, which a send from this test process (the
    test settings' broker) would not."""
    wanted = {name: str(d.pk) for name, d in deployments.items()} | {"_user": user.pk}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", OPEN],
        cwd=ROOT, env={**environment, "REALENGINE_OPEN": json.dumps(wanted)},
        capture_output=True, text=True, timeout=OPEN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ids = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: Investigation.objects.get(pk=pk) for name, pk in ids.items()}


def _replay(investigation: Investigation, cycle: datetime) -> dict:
    state = live.current_state(
        Investigation.objects.get(pk=investigation.pk), now=cycle, gate=False, stable=False
    )
    result = state.result
    kv = {c.id: c for c in result.find("kv-cache-pressure").checks}
    return {
        "alarm": result.alarm.firing,
        "ranking": list(result.ranking),
        "kv_usage": {"measured": kv["kv-usage"].measured, "outcome": kv["kv-usage"].outcome,
                     "samples": kv["kv-usage"].samples, "first_at": kv["kv-usage"].first_at,
                     "span_s": kv["kv-usage"].span_s},
        "preemption_rate": {"measured": kv["preemption-rate"].measured,
                            "outcome": kv["preemption-rate"].outcome},
        "kv_replayed": result.find("kv-cache-pressure").suggestion,
        "kv_veto": {"measured": kv["kv-held-by-running"].measured,
                    "outcome": kv["kv-held-by-running"].outcome},
        "queue_backlog": result.find("queue-backlog").suggestion,
    }  # fmt: skip


def test_kv_pressure_through_prometheus_history_and_the_real_celery_path(
    engines, calibration, costs, transactional_db, team, commander, private_redis, tmp_path
):
    engine = engines.serve(EngineFlags())
    sized = kv_pressure_load(costs, seats=CPU_DEFAULT_SEQS)
    # Long enough to hold the storm through the open and two cycles on a slow machine.
    load = dataclasses.replace(sized, duration_s=sized.warmup_s + STORM_BEFORE_OPEN_S + 80)
    constants = tiny_budget(
        calibration, kv_tokens=costs.kv_tokens, max_num_seqs=CPU_DEFAULT_SEQS,
        max_num_batched_tokens=2048, ttft_target_ms=ttft_target_ms(calibration),
        itl_ceiling_ms=100.0,
    )  # fmt: skip
    record("budget.celery", constants)
    host = engine.url.removeprefix("http://")
    (tmp_path / "prometheus").mkdir()
    with prometheus(tmp_path / "prometheus", host, [("vllm", "/metrics")], interval=SCRAPE) as prom:
        wait_for_series(prom, "vllm:kv_cache_usage_perc", timeout=60)
        via_prometheus = Deployment.objects.create(
            team=team, name="rv-via-prometheus", poll_interval_s=POLL_S, **constants
        )
        Target.objects.create(deployment=via_prometheus, kind=TargetKind.PROMETHEUS, url=prom)
        direct = Deployment.objects.create(
            team=team, name="rv-direct", poll_interval_s=POLL_S, **constants
        )
        engine_target = Target.objects.create(
            deployment=direct, kind=TargetKind.ENGINE, url=engine.metrics_url
        )
        environment = product_env(
            database_url=database_url(), broker_url=private_redis.url, data_dir=tmp_path,
            extra={"ATLAS_LIGHT_POLL_SECONDS": str(LIGHT_S)},
        )  # fmt: skip
        with (
            product_process("worker", celery_worker_args(), environment, tmp_path),
            product_process("beat", celery_beat_args(tmp_path), environment, tmp_path),
        ):
            running = Load(load.plan(11), engine.url, deadline_s=load.duration_s + 60).start()
            started = time.monotonic()
            storm = None
            while storm is None and time.monotonic() - started < STORM_TIMEOUT_S:
                time.sleep(2)
                storm = _storm(prom)
            assert storm is not None, f"no KV storm within {STORM_TIMEOUT_S} s: {load.as_dict()}"
            storm_s = round(time.monotonic() - started, 1)
            time.sleep(STORM_BEFORE_OPEN_S)  # history: Prometheus's scrapes, the light polls
            assert not Investigation.objects.exists()
            light = Poll.objects.filter(target=engine_target).count()
            opened = _open_in_product(
                environment, {"prometheus": via_prometheus, "direct": direct}, commander
            )
            watch = Watch(opened)
            deadline = time.monotonic() + CYCLES_TIMEOUT_S
            while not watch.done() and time.monotonic() < deadline:
                watch.poll()
                time.sleep(0.3)
            assert watch.done(), f"{watch.cycles}\n{tail(tmp_path, *LOGS)}"
        sent = running.join()
    found: dict[str, list[dict]] = {}
    for name, investigation in opened.items():
        found[name] = [
            {"cycle": at.isoformat(), "kv_suggested": seen.get("kv-cache-pressure"),
             **_replay(investigation, at)}
            for at, seen in watch.cycles[name][:WATCHED]
        ]  # fmt: skip
    prom_target = via_prometheus.targets.get()
    backfilled = Observation.objects.filter(
        target=prom_target, signal="kv_cache_usage", taken_at__lt=opened["prometheus"].opened_at
    ).count()
    record(
        "celery.kv_pressure",
        {"load": load.as_dict(), "storm_after_s": storm_s, "storm": storm,
         "light_polls_before_open": light, "backfilled_kv_rows": backfilled,
         "cycles": found, "sent": {k: sent[k] for k in ("statuses", "ttft_s", "errors")}},
    )  # fmt: skip
    # The storm as the light cadence stored it, with no investigation open.
    assert light >= 2, light
    # The Prometheus deployment's KV evidence rests on the minutes before the open.
    assert backfilled >= STORM_BEFORE_OPEN_S // POLL_S, backfilled
    for name, cycles in found.items():
        # The true cause is never eliminated, it leads within two cycles, and the worker's
        # own verdict confirms it within four. A cycle or two may hold it back: the 'KV
        # held by nobody' veto clears only when the running requests, each at its prompt
        # plus half its output, account for the usage within 0.15, and in a storm the
        # requests left running are the ones furthest through their outputs (the
        # scheduler evicts the latest arrivals). Measured on the engine path: usage 0.88
        # and 0.89 in doubt for two cycles; through Prometheus, 2 m rates lag the storm by
        # a scrape or two (seen once in four runs). In doubt is not wrong: a leak beside
        # the pressure is not ruled out yet, and the cause is ranked first meanwhile.
        assert all(c["kv_suggested"] != "eliminate" for c in cycles), (name, cycles)
        led = [c for c in cycles[:CYCLES] if c["ranking"][:1] == ["kv-cache-pressure"]]
        assert led, f"{name}: kv-cache-pressure never first in {CYCLES} cycles: {cycles}"
        confirmed = [
            c for c in cycles if c["ranking"][:1] == ["kv-cache-pressure"]
            and c["kv_suggested"] == "confirm"
        ]  # fmt: skip
        assert confirmed, (name, cycles)  # the worker's own verdict
        first = confirmed[0]
        assert first["alarm"] is True, (name, first)
        assert first["kv_usage"]["outcome"] == "confirm", (name, first)
        assert first["preemption_rate"]["outcome"] == "confirm", (name, first)
        assert first["queue_backlog"] == "eliminate", (name, first)  # vetoed by preemptions
    opened_at = opened["prometheus"].opened_at.timestamp()
    for cycle in found["prometheus"]:
        kv = cycle["kv_usage"]
        assert kv["first_at"] is not None and kv["first_at"] < opened_at - POLL_S, cycle
