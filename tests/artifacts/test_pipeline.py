"""The whole artifact path with a real worker and broker: browser upload, analysis in the
worker, the stored analysis on the artifact page, and its signals as playbook evidence."""

from __future__ import annotations

import pickle
import urllib.request
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from kombu import Connection

from artifacts.models import Artifact, Status
from artifacts.tasks import analyse_artifact
from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from investigations import actions, live
from tests.support import builders
from tests.support.workers import broker_for, celery_worker, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(params=["embedded", "redis"])
def worker(request, transactional_db, tmp_path, settings):
    url, options, worker_env = broker_for(request.param, tmp_path)
    settings.MEDIA_ROOT = tmp_path / "media"  # the worker's ATLAS_DATA_DIR is tmp_path
    with celery_worker(worker_env, tmp_path) as (queue, process):
        yield url, options, queue, process


def _graph_pool_snapshot(tmp_path: Path) -> bytes:
    sim = SimDeployment("graph-pool-growth", seed=0, clock=SimClock("manual"))
    server = SimServer(sim).start_in_thread()
    base = f"http://127.0.0.1:{server.ports['main']}"
    try:
        advance = urllib.request.Request(  # noqa: S310 - loopback
            f"{base}/control/advance?seconds=600", data=b"", method="POST"
        )
        urllib.request.urlopen(advance, timeout=60).read()  # noqa: S310
        with urllib.request.urlopen(  # noqa: S310 - loopback
            f"{base}/profiler/memory_snapshot?rank=0", timeout=60
        ) as response:
            return response.read()
    finally:
        server.stop()


def _upload_and_analyse(client, investigation, content, name, worker, monkeypatch):
    url, options, queue, _ = worker
    # The upload enqueues after commit; here the message goes to this worker's own queue.
    queued = []
    monkeypatch.setattr(analyse_artifact, "delay", lambda *args: queued.append(args))
    response = client.post(
        reverse("artifacts:upload", args=[investigation.pk]),
        {"file": SimpleUploadedFile(name, content)},
    )
    assert response.status_code == 302 and len(queued) == 1
    artifact = Artifact.objects.get(name=name)
    assert artifact.status == Status.QUEUED
    with Connection(url, transport_options=options) as conn:
        analyse_artifact.apply_async(args=[str(artifact.pk)], queue=queue, connection=conn)
    finished = wait_for(
        lambda: Artifact.objects.filter(
            pk=artifact.pk, status__in=[Status.DONE, Status.REJECTED]
        ).exists(),
        120,
    )
    assert finished, "the worker did not finish the analysis within 120 s"
    artifact.refresh_from_db()
    return artifact


def test_an_uploaded_snapshot_becomes_evidence(
    worker, client_for, commander, team, tmp_path, monkeypatch
):
    deployment = builders.deployment(team)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=commander
    )
    client = client_for(commander)
    artifact = _upload_and_analyse(
        client,
        investigation,
        _graph_pool_snapshot(tmp_path),
        "rank0.pickle",
        worker,
        monkeypatch,
    )
    assert artifact.status == Status.DONE, artifact.reason
    assert artifact.kind == "memory-snapshot"
    assert "cuda-graph-pool-growth" in [f["key"] for f in artifact.findings]
    assert artifact.signals["artifact_graph_pool_growth_bytes"] >= 1 << 30
    page = client.get(reverse("artifacts:detail", args=[artifact.pk]))
    assert page.status_code == 200
    assert b"cuda-graph-pool-growth" in page.content
    assert b'id="artifact-chart-data"' in page.content  # the figure, as JSON for charts.js
    # The playbook reads the file's signals as evidence.
    state = live.current_state(investigation)
    check = next(
        c for c in state.result.find("cuda-graph-pool-growth").checks if c.id == "graph-pool-growth"
    )
    assert check.outcome == "confirm" and check.measured >= 1 << 30
    assert investigation.timeline.filter(kind="artifact", summary__contains="analysed").exists()


def test_a_hostile_pickle_is_rejected_by_the_worker_and_nothing_runs(
    worker, client_for, commander, team, tmp_path, monkeypatch
):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (Path.touch, (marker,))

    deployment = builders.deployment(team)
    investigation = actions.open_investigation(
        deployment=deployment, symptom="gpu-oom", user=commander
    )
    artifact = _upload_and_analyse(
        client_for(commander),
        investigation,
        pickle.dumps(Exploit(), protocol=4),
        "snapshot.pickle",
        worker,
        monkeypatch,
    )
    assert artifact.status == Status.REJECTED
    assert "opcode" in artifact.reason
    assert not marker.exists()
    assert Path(artifact.file.path).exists()  # the file is kept for the record
