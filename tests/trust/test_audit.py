"""The audit log: every decision, fix, override, target change, role change and export is
recorded in the action's own transaction, by whom; entries are append-only for everyone
but a superuser's purge; members read an investigation's log, commanders their team's."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.template import Context, Template
from django.urls import reverse

import audit
from audit.admin import purging
from audit.log import NotInTransaction
from audit.models import AppendOnlyError, AuditEntry
from investigations import actions
from postmortems import actions as postmortem_actions
from probes.models import Target
from teams.models import Invitation, Membership, Role
from tests.support.verification import verification_as

NODE = "kv-cache-pressure"


@pytest.fixture
def investigation(deployment, commander):
    return actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)


def _entries(**filters) -> list[tuple[str, str]]:
    return list(
        AuditEntry.objects.filter(**filters).order_by("id").values_list("action", "actor_name")
    )


def test_opening_records_who_opened_it(investigation, commander):
    entry = AuditEntry.objects.get(action="investigation.open")
    assert (entry.investigation_id, entry.team_id) == (investigation.pk, investigation.team_id)
    assert (entry.actor, entry.actor_name) == (commander, commander.username)
    assert entry.object_type == "investigations.investigation"
    assert entry.object_id == str(investigation.pk)


def test_an_alert_opening_names_the_alert(deployment):
    actions.open_investigation(
        deployment=deployment, symptom="high-ttft", user=None, opened_by_text="alert AtlasHighTTFT"
    )
    assert _entries(action="investigation.open") == [("investigation.open", "alert AtlasHighTTFT")]


def test_decision_fix_and_override_close_are_recorded(investigation, responder, commander):
    for node, verb in [("router-latency", "eliminate"), (NODE, "confirm")]:
        actions.decide(
            investigation=investigation,
            node=node,
            action=verb,
            reason="seen",
            user=responder,
            evidence={},
        )
    actions.record_fix(
        investigation=investigation, node=NODE, parameters={"max_num_seqs": 30.0}, user=responder
    )
    with verification_as("failing"):
        actions.close_investigation(
            investigation=investigation,
            user=commander,
            override="customer traffic dropped; verified by hand",
        )
    assert _entries(investigation=investigation) == [
        ("investigation.open", commander.username),
        ("decision", responder.username),
        ("decision", responder.username),
        ("fix", responder.username),
        ("investigation.close_override", commander.username),
    ]
    close = AuditEntry.objects.get(action="investigation.close_override")
    assert "customer traffic dropped" in close.summary
    assert close.data == {"verification": "failing", "root_cause": NODE}
    fix = AuditEntry.objects.get(action="fix")
    assert fix.data["parameters"] == {"max_num_seqs": 30.0}


def test_a_passing_close_is_not_an_override(investigation, commander):
    with verification_as("passing"):
        actions.close_investigation(investigation=investigation, user=commander)
    assert AuditEntry.objects.filter(action="investigation.close").count() == 1
    assert not AuditEntry.objects.filter(action="investigation.close_override").exists()


def test_team_and_role_changes_through_the_pages(client_for, commander, team, viewer, outsider):
    client = client_for(commander)
    client.post(
        reverse("teams:invite", args=[team.pk]),
        {"invitee": outsider.username, "role": "viewer"},
    )
    invitation = Invitation.objects.get(team=team)
    client_for(outsider).post(reverse("teams:accept_invitation", args=[invitation.pk]))
    membership = Membership.objects.get(team=team, user=viewer)
    client = client_for(commander)
    client.post(reverse("teams:change_role", args=[team.pk, membership.pk]), {"role": "responder"})
    assert _entries(team=team) == [
        ("invitation.create", commander.username),
        ("invitation.accept", outsider.username),
        ("member.add", outsider.username),
        ("member.role", commander.username),
    ]
    change = AuditEntry.objects.get(action="member.role")
    assert change.data == {"user": viewer.username, "from": "viewer", "to": "responder"}


def test_a_refused_role_change_leaves_no_entry(client_for, commander, team):
    mine = Membership.objects.get(team=team, user=commander)
    client_for(commander).post(
        reverse("teams:change_role", args=[team.pk, mine.pk]), {"role": "viewer"}
    )
    assert not AuditEntry.objects.filter(action="member.role").exists()


def test_target_changes_through_the_pages(client_for, commander, deployment):
    client = client_for(commander)
    client.post(
        reverse("investigations:add_target", args=[deployment.pk]),
        {"kind": "engine", "url": "http://127.0.0.1:8100/metrics", "replica": "r0"},
    )
    target = Target.objects.get(deployment=deployment)
    client.post(reverse("investigations:toggle_target", args=[deployment.pk, target.pk]))
    client.post(reverse("investigations:toggle_target", args=[deployment.pk, target.pk]))
    assert [a for a, _ in _entries(team=deployment.team)] == [
        "target.create",
        "target.disable",
        "target.enable",
    ]
    created = AuditEntry.objects.get(action="target.create")
    assert created.data["url"] == "http://127.0.0.1:8100/metrics"


def test_token_creation_and_revocation_through_the_pages(client_for, commander, team):
    client = client_for(commander)
    client.post(reverse("api:tokens", args=[team.pk]), {"name": "alertmanager"})
    token = team.api_tokens.get()
    client.post(reverse("api:revoke_token", args=[team.pk, token.pk]))
    assert _entries(team=team, action__startswith="token.") == [
        ("token.create", commander.username),
        ("token.revoke", commander.username),
    ]
    # The token itself is never in the log, only its recognisable prefix.
    summaries = " ".join(AuditEntry.objects.values_list("summary", flat=True))
    assert token.prefix in summaries and token.digest not in summaries
    # Revoking twice is a 404 and writes nothing more.
    assert client.post(reverse("api:revoke_token", args=[team.pk, token.pk])).status_code == 404
    assert AuditEntry.objects.filter(action="token.revoke").count() == 1


def test_narrative_and_export_are_recorded(investigation, responder):
    postmortem_actions.save_narrative(
        investigation=investigation,
        sections={"summary": "KV full"},
        base_version=0,
        user=responder,
    )
    postmortem_actions.request_export(investigation=investigation, format="pdf", user=responder)
    assert _entries(investigation=investigation)[1:] == [
        ("postmortem.narrative", responder.username),
        ("postmortem.export", responder.username),
    ]


def test_the_entry_shares_the_actions_transaction(deployment, commander):
    """An action rolled back takes its entry with it, and the other way round."""
    with pytest.raises(RuntimeError), transaction.atomic():
        actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)
        raise RuntimeError("the request failed after the action")
    assert not AuditEntry.objects.exists()
    assert not deployment.investigations.exists()


@pytest.mark.django_db(transaction=True)
def test_recording_outside_a_transaction_is_refused(team):
    with pytest.raises(NotInTransaction):
        audit.record("team.create", team=team, summary="outside")
    assert not AuditEntry.objects.exists()


def test_unknown_actions_are_refused(team):
    with pytest.raises(ValueError, match="unknown audit action"):
        audit.record("team.rename", team=team, summary="x")


# --- Append-only ---------------------------------------------------------------------------


@pytest.fixture
def entry(investigation):
    return AuditEntry.objects.get(action="investigation.open")


def test_entries_cannot_be_edited(entry):
    entry.summary = "nothing happened"
    with pytest.raises(AppendOnlyError):
        entry.save()
    with pytest.raises(AppendOnlyError):
        AuditEntry.objects.filter(pk=entry.pk).update(summary="nothing happened")
    entry.refresh_from_db()
    assert entry.summary.startswith("Opened")


def test_entries_cannot_be_deleted_outside_the_purge(entry, commander):
    with pytest.raises(AppendOnlyError):
        entry.delete()
    with pytest.raises(AppendOnlyError):
        AuditEntry.objects.all().delete()
    with pytest.raises(PermissionDenied), purging(commander):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_a_superuser_purge_deletes(entry, django_user_model):
    root = django_user_model.objects.create_superuser("root", "r@example.com", "x" * 20)
    with purging(root):
        entry.delete()
    assert not AuditEntry.objects.filter(pk=entry.pk).exists()
    with pytest.raises(AppendOnlyError):  # the door closes again after the block
        AuditEntry.objects.all().delete()


def test_the_database_refuses_raw_updates_and_deletes_on_postgresql(entry):
    if connection.vendor != "postgresql":
        pytest.skip("the append-only trigger exists on PostgreSQL only (CI runs it there)")
    for sql in (
        "UPDATE audit_auditentry SET summary = 'x' WHERE id = %s",
        "DELETE FROM audit_auditentry WHERE id = %s",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql, [entry.pk])
    assert AuditEntry.objects.filter(pk=entry.pk, summary=entry.summary).exists()


def test_deleting_an_investigation_keeps_its_entries(investigation, entry, commander):
    """No cascade into the log: the entry keeps the ids and the text."""
    gone = investigation.pk
    investigation.delete()
    kept = AuditEntry.objects.get(pk=entry.pk)
    assert kept.investigation_id == gone
    assert kept.actor_name == commander.username


# --- The admin -------------------------------------------------------------------------------


@pytest.fixture
def staff(django_user_model):
    user = django_user_model.objects.create_user("stan", password="x" * 20, is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="audit",
            codename__in=["view_auditentry", "change_auditentry", "delete_auditentry"],
        )
    )
    return user


def test_staff_read_the_log_in_the_admin_but_cannot_change_or_delete(client, staff, entry):
    client.force_login(staff)
    assert client.get(reverse("admin:audit_auditentry_changelist")).status_code == 200
    change = reverse("admin:audit_auditentry_change", args=[entry.pk])
    assert client.get(change).status_code == 200  # read-only view
    assert client.post(change, {"summary": "x"}).status_code == 403
    assert client.get(reverse("admin:audit_auditentry_add")).status_code == 403
    delete = reverse("admin:audit_auditentry_delete", args=[entry.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk, summary=entry.summary).exists()


def test_a_superuser_deletes_through_the_admin(client, django_user_model, entry):
    root = django_user_model.objects.create_superuser("root", "r@example.com", "x" * 20)
    client.force_login(root)
    assert client.post(reverse("admin:audit_auditentry_add"), {}).status_code == 403
    delete = reverse("admin:audit_auditentry_delete", args=[entry.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not AuditEntry.objects.filter(pk=entry.pk).exists()


# --- The pages -------------------------------------------------------------------------------


def test_members_read_the_investigations_log(client_for, viewer, investigation, commander):
    response = client_for(viewer).get(reverse("investigations:audit", args=[investigation.pk]))
    assert response.status_code == 200
    assert b'data-action="investigation.open"' in response.content
    assert commander.username.encode() in response.content


def test_the_include_tag_renders_the_log(investigation):
    html = Template("{% load audit_tags %}{% investigation_audit_log investigation %}").render(
        Context({"investigation": investigation})
    )
    assert 'id="audit-log"' in html
    assert 'data-action="investigation.open"' in html


def test_the_team_page_filters_by_action(client_for, commander, team, investigation, viewer):
    membership = Membership.objects.get(team=team, user=viewer)
    client = client_for(commander)
    client.post(reverse("teams:change_role", args=[team.pk, membership.pk]), {"role": "responder"})
    page = client.get(reverse("teams:audit", args=[team.pk]), {"action": "member.role"})
    assert page.status_code == 200
    assert b'data-action="member.role"' in page.content
    assert b'data-action="investigation.open"' not in page.content
    assert Role.RESPONDER in page.content.decode()
