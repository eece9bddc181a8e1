"""A deployment is marked as polled exactly while an investigation is open on it, however
the investigation was opened, closed or deleted (probes read only the flag)."""

from __future__ import annotations

import pytest

from investigations import actions, polling
from investigations.models import Investigation
from investigations.tasks import dispatch_polls

pytestmark = pytest.mark.django_db


def _active(deployment) -> bool:
    deployment.refresh_from_db()
    return deployment.polling_active


def test_opening_and_closing_moves_the_flag(deployment, commander):
    assert not _active(deployment)
    first = actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)
    second = actions.open_investigation(deployment=deployment, symptom="itl-spikes", user=commander)
    assert _active(deployment)
    actions.close_investigation(investigation=first, user=commander, override="test")
    assert _active(deployment), "another investigation is still open"
    actions.close_investigation(investigation=second, user=commander, override="test")
    assert not _active(deployment)


def test_rows_made_without_the_actions_move_it_too(deployment, team, make_deployment):
    investigation = Investigation.objects.create(
        team=team, deployment=deployment, symptom="high-ttft"
    )
    assert _active(deployment)
    elsewhere = make_deployment("atlas-other")
    investigation.deployment = elsewhere
    investigation.save()
    assert (_active(deployment), _active(elsewhere)) == (False, True)
    investigation.delete()
    assert not _active(elsewhere)


def test_saves_of_other_fields_leave_it_alone(deployment, team, django_assert_num_queries):
    investigation = Investigation.objects.create(
        team=team, deployment=deployment, symptom="high-ttft"
    )
    investigation.title = "renamed"
    with django_assert_num_queries(1):
        investigation.save(update_fields=["title"])


def test_sync_repairs_a_wrong_flag(deployment):
    type(deployment).objects.filter(pk=deployment.pk).update(polling_active=True)
    assert polling.sync(deployment.pk) is False
    assert not _active(deployment)


@pytest.mark.django_db
def test_only_deployments_with_an_open_investigation_are_dispatched(deployment, team, settings):
    """At their own cadence, to poll and evaluate; the light cadence that keeps history
    before the alarm is off here (tests/probes/test_poll_task.py has it)."""
    from probes.models import Target, TargetKind
    from tests.support.hostile import hostile_server

    settings.ATLAS_LIGHT_POLL_SECONDS = 0
    with hostile_server() as base:
        Target.objects.create(deployment=deployment, kind=TargetKind.ENGINE, url=base + "/ok")
        assert dispatch_polls.apply().get() == 0
        Investigation.objects.create(team=team, deployment=deployment, symptom="high-ttft")
        assert dispatch_polls.apply().get() == 1
