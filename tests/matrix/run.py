"""Running one matrix case through the diagnose path or the Celery path, over real HTTP
against a manual-clock simulator. Both return, per symptom, the evaluation after the
second poll cycle."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from investigations.evaluation import Evaluation, NodeResult
from tests.matrix.cases import DCGM, ENGINE, LOG, Case
from tests.support import builders

POLL_S = 15
START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


def post(base: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(base + path, data=data, method="POST")  # noqa: S310
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
        return json.loads(response.read())


@contextmanager
def simulator(name: str, seed: int = 0) -> Iterator[str]:
    server = SimServer(SimDeployment(name, seed=seed, clock=SimClock("manual"))).start_in_thread()
    try:
        yield f"http://127.0.0.1:{server.ports['main']}"
    finally:
        server.stop()


def _kind(path: str) -> str:
    return {ENGINE: "engine", DCGM: "dcgm", LOG: "log"}[path]


def via_diagnose(name: str, case: Case) -> dict[str, Evaluation]:
    """``manage.py diagnose``'s engine (Diagnosis) with the case's artifacts fetched from the
    simulator's profiler endpoints through the same guarded client."""
    out = {}
    with simulator(name) as base:
        clock = 0.0
        for open_at, symptom in case.opens():
            if open_at > clock:
                post(base, f"/control/advance?seconds={open_at - clock}")
                clock = open_at
            diagnosis, clock = open_diagnosis(base, case, symptom, clock)
            out[symptom] = diagnosis.evaluate(now=START.timestamp() + clock)
    return out


def open_diagnosis(base: str, case: Case, symptom: str, clock: float, poll_s: float = POLL_S):
    """Diagnose's engine opened at simulated ``clock``: the case's artifacts fetched, then
    two poll cycles ``poll_s`` apart. Returns the diagnosis and the clock after them."""
    from artifacts.errors import ArtifactRejected
    from artifacts.fetch import fetch_and_analyse
    from deployments.budget import Budget
    from investigations.diagnose import Diagnosis
    from investigations.playbook import playbooks
    from probes.policy import fetch_policy

    diagnosis = Diagnosis(
        playbooks()[symptom],
        Budget(**case.budget),
        [(_kind(path), base + path) for path in case.targets],
        fetch_policy(),
    )
    now = START.timestamp() + clock
    for n, path in enumerate(case.artifacts):
        # e.g. no gc pauses yet: evidence that is not there is not evidence.
        with contextlib.suppress(ArtifactRejected):
            diagnosis.add_artifact(str(n), fetch_and_analyse(base + path), now)
    for cycle in range(2):
        if cycle:
            post(base, f"/control/advance?seconds={poll_s}")
            clock += poll_s
            now += poll_s
        diagnosis.cycle(now=now)
    return diagnosis, clock


def via_celery(name: str, case: Case, team, user) -> dict[str, Evaluation]:
    """Targets and investigations in the database, artifacts collected by the collect task
    and analysed by the analysis task, cycles stored by the poll task, evaluation as the
    investigation page shows it."""
    from artifacts.tasks import collect_artifacts
    from investigations import actions, live
    from investigations.tasks import poll_and_evaluate
    from probes.models import Target, TargetKind

    kinds = {ENGINE: TargetKind.ENGINE, DCGM: TargetKind.DCGM, LOG: TargetKind.LOG_HTTP}
    out = {}
    with simulator(name) as base:
        deployment = builders.deployment(team, f"sim-{name}"[:100], **case.budget)
        for path in case.targets:
            Target.objects.create(deployment=deployment, kind=kinds[path], url=base + path)
        for path in case.artifacts:
            Target.objects.create(deployment=deployment, kind=TargetKind.PROFILER, url=base + path)
        clock = 0.0
        cycle = datetime.now(tz=UTC).replace(microsecond=0)
        for open_at, symptom in case.opens():
            if open_at > clock:
                post(base, f"/control/advance?seconds={open_at - clock}")
                cycle += timedelta(seconds=open_at - clock)
                clock = open_at
            investigation = actions.open_investigation(
                deployment=deployment, symptom=symptom, user=user
            )
            # Collected now, analysed by the (eager) analysis task on commit.
            collect_artifacts.apply(args=[str(investigation.pk), user.pk])
            for n in range(2):
                if n:
                    post(base, f"/control/advance?seconds={POLL_S}")
                    cycle += timedelta(seconds=POLL_S)
                    clock += POLL_S
                poll_and_evaluate.apply(args=[str(deployment.pk), cycle.isoformat()])
            out[symptom] = live.current_state(investigation, now=cycle).result
    return out


def causes(result: Evaluation) -> dict[str, NodeResult]:
    return result.causes()
