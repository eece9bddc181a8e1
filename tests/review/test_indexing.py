"""Search documents follow the record: every part of it that people write changes the
document once it commits, deletions included, and a failure to index never undoes the
change itself."""

from __future__ import annotations

import logging

import pytest

from investigations import actions
from investigations.models import Decision, Investigation
from postmortems import actions as postmortem_actions
from postmortems.models import Postmortem
from review import actions as review_actions
from review import indexing
from review.models import ReviewComment, SearchDocument
from tests.review.conftest import closed_incident


def doc(investigation) -> SearchDocument:
    return SearchDocument.objects.get(pk=investigation.pk)


def test_the_whole_record_is_indexed_as_it_is_written(
    deployment, commander, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        inv = closed_incident(
            deployment,
            commander,
            title="ITL spikes during the launch",
            reason="gen-2 collections of 180 ms",
            note="froze long-lived objects",
            narrative="The loop stalled at peak.",
            override="verification window cut short",
        )
        review_actions.add_comment(investigation=inv, user=commander, body="Alert on gc time")
    document = doc(inv)
    assert document.title_text == "ITL spikes during the launch"
    assert document.cause_text.startswith("gc-pauses. ")
    for written in (
        "Ruled out by its own check",
        "gen-2 collections of 180 ms",
        "froze long-lived objects",
        "The loop stalled at peak.",
        "verification window cut short",
        "Alert on gc time",
    ):
        assert written in document.body_text


def test_only_the_newest_narrative_is_searchable(
    deployment, commander, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        inv = closed_incident(deployment, commander, title="t", narrative="first draft")
        postmortem_actions.save_narrative(
            investigation=inv, sections={"narrative": "second draft"}, base_version=1, user=None
        )
    assert "second draft" in doc(inv).body_text
    assert "first draft" not in doc(inv).body_text


def test_deletions_update_the_document(deployment, commander, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        inv = closed_incident(deployment, commander, title="t", narrative="narrated")
        comment = review_actions.add_comment(investigation=inv, user=commander, body="remove me")
    assert "remove me" in doc(inv).body_text
    with django_capture_on_commit_callbacks(execute=True):
        comment.delete()
    assert "remove me" not in doc(inv).body_text
    with django_capture_on_commit_callbacks(execute=True):
        Postmortem.objects.get(investigation=inv).delete()
    assert "narrated" not in doc(inv).body_text
    # Deleting the investigation cascades to its document and schedules no rebuilds.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        Investigation.objects.filter(pk=inv.pk).delete()
    assert callbacks == []
    assert not SearchDocument.objects.filter(pk=inv.pk).exists()


def test_saving_fields_the_document_does_not_read_schedules_nothing(
    deployment, commander, django_capture_on_commit_callbacks
):
    inv = actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)
    inv.alarm_firing = True
    with django_capture_on_commit_callbacks() as callbacks:
        inv.save(update_fields=["alarm_firing"])
    assert callbacks == []
    with django_capture_on_commit_callbacks() as callbacks:
        inv.save(update_fields=["title"])
    assert len(callbacks) == 1


def test_an_indexing_failure_is_logged_and_the_decision_stays(
    deployment, commander, django_capture_on_commit_callbacks, monkeypatch, caplog
):
    inv = actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)

    def broken(ids):
        raise RuntimeError("index unavailable")

    # A fault that cannot be caused for real without breaking the database under test.
    monkeypatch.setattr(indexing, "rebuild", broken)
    with caplog.at_level(logging.ERROR), django_capture_on_commit_callbacks(execute=True):
        actions.decide(
            investigation=inv, node="router-latency", action="eliminate", reason="4 ms",
            user=commander, evidence={},
        )  # fmt: skip
    assert Decision.objects.filter(investigation=inv).count() == 1
    assert "index unavailable" in caplog.text


def test_reindex_repairs_missing_and_stale_documents(deployment, commander):
    # Without on-commit callbacks (as after a failure), documents are missing...
    inv = closed_incident(deployment, commander, title="stale one", reason="gc at 200 ms")
    assert not SearchDocument.objects.filter(pk=inv.pk).exists()
    from django.core.management import call_command

    call_command("reindex", verbosity=0)
    assert "gc at 200 ms" in doc(inv).body_text
    # ...or stale: a bulk update bypasses signals.
    Investigation.objects.filter(pk=inv.pk).update(title="renamed by SQL")
    call_command("reindex", team=deployment.team.name, verbosity=0)
    assert doc(inv).title_text == "renamed by SQL"


def test_reindex_rejects_an_unknown_team(db):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no team named"):
        call_command("reindex", team="nobody")


def test_comments_are_bounded(deployment, commander):
    inv = actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)
    with pytest.raises(ValueError, match="limited"):
        review_actions.add_comment(investigation=inv, user=commander, body="x" * 4001)
    with pytest.raises(ValueError, match="needs some text"):
        review_actions.add_comment(investigation=inv, user=commander, body="   ")
    assert not ReviewComment.objects.exists()
