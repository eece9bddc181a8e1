"""Identical artifact bytes are stored once and analysed once, per team (issue 19, item 3).

Real files under a temporary MEDIA_ROOT, the real database, the real analysers; the one
stand-in is the queue: ``analyse_artifact.delay`` appends to a list these tests then run
in order, so a test decides when "the worker" gets to each message.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, connections, transaction
from django.urls import reverse

from artifacts import analysis as analysis_module
from artifacts import tasks
from artifacts.actions import QuotaExceeded
from artifacts.models import Artifact, Status
from artifacts.tasks import analyse_artifact
from investigations import actions
from investigations.tokens import create_token
from probes.models import Observation
from tests.conftest import require_service
from tests.support import builders
from tests.support.services import wait_until


def _trace(events: int = 4, name: str = "k") -> bytes:
    rows = [
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": i * 10,
         "dur": 5, "args": {"stream": 7, "correlation": i}}
        for i in range(events)
    ]  # fmt: skip
    return json.dumps({"schemaVersion": 1, "traceEvents": rows}).encode()


def _gc_log() -> bytes:
    block = (
        "gc: collecting generation 2...\n"
        "gc: objects in each generation: 500 3000 1200000\n"
        "gc: objects in permanent generation: 0\n"
        "gc: done, 100 unreachable, 0 uncollectable, 0.1200s elapsed\n"
    )
    return (block * 5).encode()


GARBAGE = b"#!/bin/sh\necho this is not a profiler artifact\n"


@pytest.fixture(autouse=True)
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture(autouse=True)
def queued(monkeypatch) -> list[str]:
    """The analysis messages, in the order the uploads sent them."""
    sent: list[str] = []
    monkeypatch.setattr(analyse_artifact, "delay", lambda artifact_id: sent.append(artifact_id))
    return sent


@pytest.fixture
def analyses(monkeypatch) -> list[str]:
    """The files the real analyser was run on (a counting wrapper around it)."""
    runs: list[str] = []
    real = analysis_module.analyse_file

    def counted(path, *args, **kwargs):
        runs.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(tasks, "analyse_file", counted)
    return runs


def _open(team, commander, name="atlas-prod"):
    deployment = builders.deployment(team, name=name)
    return actions.open_investigation(deployment=deployment, symptom="gpu-oom", user=commander)


def _store(investigation, content: bytes, name="trace.json", kind="") -> Artifact:
    return tasks.store_and_analyse(
        deployment=investigation.deployment,
        investigation=investigation,
        chunks=[content[: len(content) // 2], content[len(content) // 2 :]],
        name=name,
        kind=kind,
        source="upload",
    )


def _run(artifact_id) -> str:
    return analyse_artifact.apply(args=[str(artifact_id)]).get()


def _files(media: Path) -> list[Path]:
    return [p for p in (media / "artifacts").rglob("*") if p.is_file()]


@pytest.mark.django_db
def test_the_same_bytes_twice_are_one_file_and_one_analysis(
    team, commander, media, analyses, django_capture_on_commit_callbacks
):
    first_incident = _open(team, commander)
    second_incident = _open(team, commander, name="atlas-canary")  # another deployment
    content = _trace()
    first = _store(first_incident, content, name="trace-a.json")
    assert _run(first.pk) == Status.DONE
    second = _store(second_incident, content, name="trace-b.json")
    assert second.duplicate_of_id == first.pk and second.file.name == first.file.name
    assert len(_files(media)) == 1 and _files(media)[0].read_bytes() == content

    assert _run(second.pk) == Status.DONE
    assert analyses == [first.file.path]  # the analyser ran once, on the first upload
    first.refresh_from_db()
    second.refresh_from_db()
    assert (second.kind, second.analysis, second.signals) == (
        first.kind,
        first.analysis,
        first.signals,
    )
    assert second.analysis_seconds is None  # it took no analysis time of its own
    # Its evidence is its own: its deployment, its series, its capture time.
    label = f"artifact={str(second.pk)[:8]}"
    mine = Observation.objects.filter(target__deployment=second.deployment, labels=label)
    assert {(o.signal, o.value) for o in mine} == set(second.signals.items()) != set()
    assert second_incident.timeline.filter(summary__contains="the same file as trace-a.json")
    assert _run(second.pk) == "skipped"  # a redelivered message does nothing more
    assert len(analyses) == 1


@pytest.mark.django_db
def test_a_duplicate_sent_while_the_first_is_queued_waits_and_is_settled_by_its_end(
    team, commander, analyses, queued, django_capture_on_commit_callbacks
):
    incident = _open(team, commander)
    content = _trace()
    with django_capture_on_commit_callbacks(execute=True):
        first = _store(incident, content, name="one.json")
        second = _store(incident, content, name="two.json")
        third = _store(incident, content, name="three.json")
    assert queued == [str(first.pk), str(second.pk), str(third.pk)]
    # The worker takes the duplicates' messages first: nothing to copy yet.
    assert _run(second.pk) == "waiting"
    assert Artifact.objects.get(pk=second.pk).status == Status.QUEUED
    # The first copy's analysis settles every waiting duplicate in its own transaction.
    assert _run(first.pk) == Status.DONE
    assert set(Artifact.objects.values_list("status", flat=True)) == {Status.DONE}
    assert _run(third.pk) == "skipped"  # already settled by the first's end
    assert len(analyses) == 1
    notes = incident.timeline.filter(summary__contains="the same file as one.json")
    assert notes.count() == 4  # two at upload, two when each took the analysis


@pytest.mark.django_db
def test_a_rejected_file_sent_again_is_not_analysed_again(team, commander, analyses):
    """The point against a hostile client: the same bomb or garbage, sent twenty times,
    costs one analysis and one file."""
    incident = _open(team, commander)
    first = _store(incident, GARBAGE)
    assert _run(first.pk) == Status.REJECTED
    copies = [_store(incident, GARBAGE, name=f"again-{i}.bin") for i in range(20)]
    assert [_run(c.pk) for c in copies] == [Status.REJECTED] * 20
    assert len(analyses) == 1
    reasons = set(Artifact.objects.values_list("reason", flat=True))
    assert len(reasons) == 1 and "not a memory snapshot" in reasons.pop()


@pytest.mark.django_db
def test_another_declared_kind_or_a_gc_log_of_another_deployment_is_analysed_itself(
    team, commander, analyses
):
    here = _open(team, commander)
    there = _open(team, commander, name="atlas-canary")
    log = _store(here, _gc_log(), name="stderr.log")
    assert _run(log.pk) == Status.DONE
    # The same deployment: the same latencies to correlate with, the same analysis.
    assert _run(_store(here, _gc_log(), name="again.log").pk) == Status.DONE
    assert len(analyses) == 1
    # Another deployment's gc log is correlated with that deployment's latencies.
    elsewhere = _store(there, _gc_log(), name="stderr.log")
    assert elsewhere.duplicate_of_id == log.pk  # the file is still shared
    assert _run(elsewhere.pk) == Status.DONE
    assert len(analyses) == 2
    # A declared kind the first copy was not analysed as gets its own verdict.
    misdeclared = _store(here, _gc_log(), name="x.log", kind="memory-snapshot")
    assert _run(misdeclared.pk) == Status.REJECTED
    assert len(analyses) == 3
    assert len({a.file.name for a in Artifact.objects.all()}) == 1


@pytest.mark.django_db
def test_a_duplicate_that_would_differ_is_queued_when_the_first_copy_ends(
    team, commander, analyses, queued, django_capture_on_commit_callbacks
):
    here = _open(team, commander)
    there = _open(team, commander, name="atlas-canary")
    with django_capture_on_commit_callbacks(execute=True):
        log = _store(here, _gc_log(), name="stderr.log")
        elsewhere = _store(there, _gc_log(), name="stderr.log")
    assert _run(elsewhere.pk) == "waiting"
    queued.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert _run(log.pk) == Status.DONE
    assert queued == [str(elsewhere.pk)]  # not settled with the other deployment's result
    assert _run(elsewhere.pk) == Status.DONE
    assert len(analyses) == 2


@pytest.mark.django_db
def test_deleting_the_first_copy_releases_a_waiting_duplicate(
    team, commander, media, analyses, queued, django_capture_on_commit_callbacks
):
    incident = _open(team, commander)
    content = _trace()
    first = _store(incident, content, name="one.json")
    second = _store(incident, content, name="two.json")
    assert _run(second.pk) == "waiting"
    with django_capture_on_commit_callbacks(execute=True):
        Artifact.objects.filter(pk=first.pk).delete()
    assert queued == [str(second.pk)]
    assert _run(second.pk) == Status.DONE  # analysed on the file it shares
    second.refresh_from_db()
    assert second.duplicate_of_id is None and Path(second.file.path).read_bytes() == content
    # It is now the team's first copy: the next upload of the bytes takes its analysis.
    third = _store(incident, content, name="three.json")
    assert third.duplicate_of_id == second.pk
    assert _run(third.pk) == Status.DONE and len(analyses) == 1


@pytest.mark.django_db
def test_a_duplicate_does_not_count_twice_against_the_team_quota(settings, team, commander, media):
    settings.ATLAS_ARTIFACT_TEAM_QUOTA_BYTES = 2 * 4096
    incident = _open(team, commander)
    same = b"\x00" * 4096
    for i in range(10):
        _store(incident, same, name=f"same-{i}.bin")
    _store(incident, b"\x01" * 4096, name="other.bin")  # the second distinct 4 KiB: full
    with pytest.raises(QuotaExceeded, match="quota is full"):
        _store(incident, b"\x02" * 4096, name="third.bin")
    _store(incident, same, name="same-again.bin")  # held already: no more room needed
    assert Artifact.objects.count() == 12 and len(_files(media)) == 2


@pytest.mark.django_db
def test_dedup_never_crosses_teams(
    client, team, commander, other_team, outsider, media, analyses, queued,
    django_capture_on_commit_callbacks,
):  # fmt: skip
    """Another team sending the same bytes learns nothing: its upload is queued, stored in
    its own folder and analysed for it, as if no one else had the file."""
    content = _trace()
    ours = _store(_open(team, commander), content)
    assert _run(ours.pk) == Status.DONE
    theirs_incident = _open(other_team, outsider, name="their-prod")
    token = create_token(team=other_team, name="ci", user=outsider)[1]
    url = reverse("artifacts:api_upload", args=[theirs_incident.pk]) + "?name=trace.json"
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            url,
            data=content,
            content_type="application/octet-stream",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["status"], body["duplicate_of"], body["findings"]) == ("queued", None, [])
    theirs = Artifact.objects.get(pk=body["id"])
    assert theirs.file.name != ours.file.name and theirs.file.name.startswith(
        f"artifacts/{other_team.pk}/"
    )
    assert queued == [str(theirs.pk)]
    assert _run(theirs.pk) == Status.DONE
    assert len(analyses) == 2 and len(_files(media)) == 2


@pytest.mark.django_db
def test_the_page_and_the_api_name_the_first_copy(
    client, client_for, responder, team, commander, queued, django_capture_on_commit_callbacks
):
    incident = _open(team, commander)
    web = client_for(responder)
    upload = reverse("artifacts:upload", args=[incident.pk])
    with django_capture_on_commit_callbacks(execute=True):
        for name in ("first.json", "again.json"):
            web.post(upload, {"file": SimpleUploadedFile(name, _trace())})
    first, again = Artifact.objects.get(name="first.json"), Artifact.objects.get(name="again.json")
    for artifact_id in queued:
        _run(artifact_id)
    page = web.get(reverse("artifacts:detail", args=[again.pk])).content.decode()
    assert reverse("artifacts:detail", args=[first.pk]) in page
    assert "stored once, analysed once" in page
    token = create_token(team=team, name="ci", user=commander)[1]
    body = client.get(
        reverse("artifacts:api_artifact", args=[again.pk]), HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    assert (body["status"], body["duplicate_of"]) == ("done", str(first.pk))


@pytest.mark.django_db(transaction=True)
def test_a_duplicates_task_racing_the_first_copys_commit_waits_and_is_settled_once(
    team, commander, analyses
):
    """Deterministic interleaving on PostgreSQL: the first copy's analysis has stored its
    result and settled the duplicate, but not committed, when the duplicate's own task
    runs. That task must wait on the first copy's row lock (seen in pg_stat_activity), not
    read "analysing" and leave, and then find nothing left to do: one analysis, one
    hand-over, one timeline note."""
    if connection.vendor != "postgresql":
        require_service("PostgreSQL", "row-lock waits are observed through pg_stat_activity")
    incident = _open(team, commander)
    first = _store(incident, _trace(), name="one.json")
    duplicate = _store(incident, _trace(), name="two.json")
    finished, release = threading.Event(), threading.Event()
    outcome: dict[str, str] = {}

    def finish_first_and_hold() -> None:
        try:
            with transaction.atomic():  # the analysis' own transactions are savepoints here
                outcome["first"] = _run(first.pk)
                finished.set()
                release.wait(timeout=60)
        finally:
            connections.close_all()

    def duplicates_task() -> None:
        try:
            outcome["duplicate"] = _run(duplicate.pk)
        finally:
            connections.close_all()

    holder = threading.Thread(target=finish_first_and_hold)
    holder.start()
    try:
        assert finished.wait(timeout=60)
        racer = threading.Thread(target=duplicates_task)
        racer.start()
        assert wait_until(lambda: _waiting_on_a_lock() == 1, 30), "the task did not wait"
        assert "duplicate" not in outcome
    finally:
        release.set()
        holder.join(timeout=60)
    racer.join(timeout=60)
    assert outcome == {"first": Status.DONE, "duplicate": "skipped"}
    assert Artifact.objects.get(pk=duplicate.pk).status == Status.DONE
    assert len(analyses) == 1
    assert incident.timeline.filter(summary__startswith="two.json: the same file").count() == 1


def _waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]
