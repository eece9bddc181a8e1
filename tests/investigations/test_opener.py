"""Who opened an investigation is stored when it opens, as text that outlives the user;
the postmortem reads it from there, never from the wording of the timeline."""

from __future__ import annotations

import pytest

from investigations import actions
from investigations.models import Investigation
from postmortems.record import load_document

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", "cora-commander"), ("API token ci", "API token ci"), ("alert AtlasHighTTFT", None)],
)
def test_the_opener_is_stored(deployment, commander, text, expected):
    user = None if text.startswith("alert") else commander
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=user, opened_by_text=text
    )
    investigation.refresh_from_db()
    assert investigation.opened_by_name == (expected or text)
    assert investigation.timeline.get(kind="opened").data["opened_by"] == (expected or text)


def test_the_postmortem_names_the_stored_opener_whatever_the_timeline_says(deployment):
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=None, opened_by_text="alert AtlasTTFT"
    )
    investigation.timeline.filter(kind="opened").update(summary="Opened by mallory")
    doc = load_document(Investigation.objects.get(pk=investigation.pk))
    assert doc["opened_by"] == "alert AtlasTTFT"


def test_the_name_outlives_the_user(deployment, commander):
    investigation = actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=commander
    )
    commander.delete()
    investigation.refresh_from_db()
    assert investigation.opened_by is None
    assert investigation.opened_by_name == "cora-commander"
