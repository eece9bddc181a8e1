"""A closed investigation's postmortem is a record: the playbook it opened with and the
verification, gate and chart its close judged are stored, so neither an edited playbook
file nor evaluation code that would now answer differently changes a byte of it."""

from __future__ import annotations

import shutil

import pytest
from django.template.loader import render_to_string

from investigations import actions, frozen, live, playbook, verification
from investigations.models import Investigation
from postmortems.markdown import render_markdown
from postmortems.record import load_document
from postmortems.svg import alarm_chart

URL = "https://atlas.example/investigations/x/"


def _renders(investigation: Investigation) -> tuple[str, str]:
    doc = load_document(Investigation.objects.get(pk=investigation.pk), investigation_url=URL)
    html = render_to_string(
        "postmortems/_document.html",
        {"doc": doc, "chart_svg": alarm_chart(doc["chart"]), "can_edit": False},
    )
    return html, render_markdown(doc)


@pytest.fixture
def edited_playbooks(tmp_path, monkeypatch):
    """The playbooks folder with high-ttft edited: a new version, title, node title and
    alarm threshold. The shipped playbooks stay cached until a test clears the cache."""
    folder = tmp_path / "playbooks"
    shutil.copytree(playbook.PLAYBOOK_DIR, folder)
    path = folder / "high-ttft.yaml"
    text = path.read_text(encoding="utf-8")
    for old, new in [
        (f"version: {playbook.get_playbook('high-ttft').version}\n", "version: 7\n"),
        ("title: p95 time to first token over target\n", "title: TTFT, renamed\n"),
        ("title: p95 TTFT over the target\n", "title: Alarm renamed\n"),
        ("budget.ttft_target_ms / 1000}", "budget.ttft_target_ms / 500}"),
        ("title: The router is slow to forward requests", "title: Router, renamed"),
    ]:
        assert old in text, old
        text = text.replace(old, new, 1)
    path.write_text(text, encoding="utf-8")
    playbook.playbooks()
    monkeypatch.setattr(playbook, "PLAYBOOK_DIR", folder)
    yield path
    playbook.playbooks.cache_clear()  # after monkeypatch restores the shipped folder


def test_the_record_freezes_the_playbook_at_open_and_the_verdict_at_close(incident):
    shipped = playbook.get_playbook("high-ttft")
    assert (incident.playbook_version, incident.playbook_digest) == (
        shipped.version,
        shipped.digest,
    )
    assert incident.playbook_facts == frozen.playbook_facts(shipped)
    facts = incident.closing_facts
    assert facts["verification"]["state"] == "passing"
    assert facts["gate"]["backtest"] is not None and facts["gate"]["rule"]["alert"]
    assert facts["alarm_threshold"] == pytest.approx(0.6)
    assert facts["alarm_series"] and facts["request_rate"]


def test_an_edited_playbook_file_rewrites_no_closed_postmortem(incident, edited_playbooks):
    before = _renders(incident)
    playbook.playbooks.cache_clear()
    edited = playbook.get_playbook("high-ttft")
    assert (edited.version, edited.title) == (7, "TTFT, renamed")  # the edit is live
    after = _renders(incident)
    assert after == before
    html, md = after
    assert f"high-ttft v{incident.playbook_version}" in md and "high-ttft v7" not in md
    assert "Router, renamed" not in html and "The router is slow to forward requests" in html


def test_evaluation_that_now_answers_otherwise_rewrites_no_closed_postmortem(incident, monkeypatch):
    before = _renders(incident)

    def failing(*args, **kwargs):
        raise AssertionError("a closed postmortem must not re-run the live state")

    monkeypatch.setattr(live, "current_state", failing)
    monkeypatch.setattr(verification, "verify", failing)
    monkeypatch.setattr(frozen, "closing_facts_of", failing)
    assert _renders(incident) == before


def test_an_open_draft_follows_the_live_state_and_the_playbook_it_opened_with(
    open_incident, edited_playbooks
):
    playbook.playbooks.cache_clear()
    md = _renders(open_incident)[1]
    opened_with = open_incident.playbook_version  # the shipped version, not the edit's 7
    assert opened_with != 7 and f"high-ttft v{opened_with}" in md  # its record keeps that
    newer = actions.open_investigation(
        deployment=open_incident.deployment, symptom="high-ttft", user=None
    )
    assert newer.playbook_version == 7
    assert "high-ttft v7" in _renders(newer)[1]


def test_the_migration_freezes_what_an_old_closed_record_kept(incident, edited_playbooks):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("investigations.migrations.0011_freeze_existing_records")
    shipped_version = incident.playbook_version
    Investigation.objects.filter(pk=incident.pk).update(
        playbook_facts={}, playbook_version=None, playbook_digest="", closing_facts={}
    )
    migration.freeze(apps, None)  # the shipped playbook is still the cached one
    migrated = Investigation.objects.get(pk=incident.pk)
    assert migrated.playbook_version == shipped_version
    assert migrated.playbook_facts["source"] == "migration"
    facts = migrated.closing_facts
    assert facts["source"] == "migration"
    assert facts["verification"]["state"] == "passing"  # as its close audit entry says
    assert facts["verification"]["criteria"] == []  # never stored: cannot be recovered
    assert facts["gate"]["rule"]["alert"] and facts["gate"]["backtest"] is None
    assert facts["alarm_threshold"] == pytest.approx(0.6)  # from its alarm events
    assert facts["alarm_series"] is None  # read from the stored observations
    before = _renders(migrated)
    assert "passing" in before[1]
    playbook.playbooks.cache_clear()
    assert playbook.get_playbook("high-ttft").version == 7
    assert _renders(migrated) == before
    migration.freeze(apps, None)  # idempotent: frozen rows are left alone
    assert Investigation.objects.get(pk=incident.pk).closing_facts == facts
