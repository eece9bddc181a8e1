"""Narrative edits are versions: kept, attributed, newest shown; a stale edit is refused
with a message instead of silently overwriting someone else's words."""

from __future__ import annotations

from django.urls import reverse

from postmortems.models import PostmortemVersion


def _edit(client, investigation, base: int, summary: str, **more):
    return client.post(
        reverse("postmortems:edit", args=[investigation.pk]),
        {"base_version": base, "summary": summary, **more},
    )


def test_two_edits_by_two_people_are_both_kept_and_attributed(
    client_for, responder, commander, incident
):
    assert (
        _edit(client_for(responder), incident, 0, "KV cache ran full under load.").status_code
        == 302
    )
    response = _edit(
        client_for(commander),
        incident,
        1,
        "The KV cache ran full at the morning peak.",
        went_well="The alarm fired within a minute.",
        comment="tightened the summary",
    )
    assert response.status_code == 302
    versions = list(PostmortemVersion.objects.order_by("number"))
    assert [(v.number, v.edited_by) for v in versions] == [(1, responder), (2, commander)]
    assert versions[0].sections["summary"] == "KV cache ran full under load."
    assert versions[1].comment == "tightened the summary"
    page = client_for(responder).get(reverse("postmortems:detail", args=[incident.pk]))
    text = page.content.decode()
    assert "The KV cache ran full at the morning peak." in text
    assert "The alarm fired within a minute." in text
    assert "version 2, edited by cora-commander" in text
    assert 'name="base_version" value="2"' in text


def test_a_stale_edit_is_refused_with_a_clear_message(client_for, responder, commander, incident):
    _edit(client_for(responder), incident, 0, "First take.")
    # The commander loaded version 0 too, before the responder saved.
    client = client_for(commander)
    response = _edit(client, incident, 0, "My take, written on an old copy.")
    assert response.status_code == 409
    text = response.content.decode()
    assert "remi-responder saved version 1" in text and "while you were editing version 0" in text
    assert "My take, written on an old copy." in text  # kept in the form, not lost
    assert 'name="base_version" value="1"' in text  # saving again now builds on version 1
    assert PostmortemVersion.objects.count() == 1
    assert PostmortemVersion.objects.get().sections["summary"] == "First take."


def test_saving_the_same_text_again_makes_no_version(client_for, responder, incident):
    client = client_for(responder)
    _edit(client, incident, 0, "Same.")
    _edit(client, incident, 1, "Same.")
    assert PostmortemVersion.objects.count() == 1


def test_an_export_renders_the_version_it_was_requested_at(
    client_for, responder, incident, media, django_capture_on_commit_callbacks
):
    from postmortems import tasks
    from postmortems.models import Export

    client = client_for(responder)
    _edit(client, incident, 0, "Version one summary.")
    with django_capture_on_commit_callbacks(execute=False):
        client.post(reverse("postmortems:export", args=[incident.pk]), {"format": "markdown"})
    _edit(client, incident, 1, "Version two summary.")
    export = Export.objects.get()
    tasks.export_postmortem.apply(args=[str(export.pk)])
    export.refresh_from_db()
    body = export.file.read().decode()
    export.file.close()
    assert export.version_number == 1
    assert "Version one summary." in body and "Version two summary." not in body
