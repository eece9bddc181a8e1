"""Issue 19.11: changes made in the Django admin wrote no audit entry, so a superuser could
make anyone a commander (or staff) and the log would show nothing. Every change here goes
through the real admin views, as a superuser with the Django test client, with the form
data the admin page itself renders."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEntry
from teams.models import Membership, Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "x" * 20)


@pytest.fixture
def admin_client_as_root(client, root):
    client.force_login(root)
    return client


def _value(bound) -> object:
    value = bound.value()
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else ""
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return value


def _fields(form) -> dict[str, object]:
    data: dict[str, object] = {}
    for bf in form:
        if bf.field.disabled:
            continue
        widget = bf.field.widget
        if hasattr(widget, "widgets"):  # a split date and time posts one value per part
            parts = widget.decompress(bf.value())
            for i, (sub, part) in enumerate(zip(widget.widgets, parts, strict=True)):
                data[f"{bf.html_name}_{i}"] = sub.format_value(part) or ""
        else:
            data[bf.html_name] = _value(bf)
    return data


def _form_data(response) -> dict[str, object]:
    """What the browser would post back unchanged: the admin form's fields as rendered,
    and every inline formset's management form and rows."""
    data = _fields(response.context["adminform"].form)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        data.update(_fields(formset.management_form))
        for row in formset.forms:
            data.update(_fields(row))
    return {k: v for k, v in data.items() if v != ""}


def _entries(**filters) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(**filters).order_by("id"))


def test_a_role_changed_in_the_membership_admin_is_audited(
    admin_client_as_root, root, team, commander, viewer
):
    membership = Membership.objects.get(user=viewer)
    url = reverse("admin:teams_membership_change", args=[membership.pk])
    data = _form_data(admin_client_as_root.get(url))
    data["role"] = Role.COMMANDER
    response = admin_client_as_root.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    membership.refresh_from_db()
    assert membership.role == Role.COMMANDER
    (entry,) = _entries(action="member.role")
    assert (entry.actor, entry.actor_name, entry.team_id) == (root, "root", team.pk)
    assert entry.object_id == str(membership.pk)
    assert entry.data == {"via": "admin", "changed": {"role": ["viewer", "commander"]}}
    assert "role viewer -> commander" in entry.summary
    # The team's audit page shows it, with the changes made through the pages.
    commanders = Client()
    commanders.force_login(commander)
    page = commanders.get(reverse("teams:audit", args=[team.pk]))
    assert page.status_code == 200 and b"role viewer -&gt; commander" in page.content
    # Saving the form again unchanged writes nothing: an entry says something changed.
    assert (
        admin_client_as_root.post(url, _form_data(admin_client_as_root.get(url))).status_code == 302
    )
    assert len(_entries(action="member.role")) == 1


def test_role_changes_adds_and_removals_in_the_team_admins_inline_are_audited(
    admin_client_as_root, django_user_model, root, team, commander, viewer, responder
):
    newcomer = django_user_model.objects.create_user("nina-new", password="x" * 20)
    url = reverse("admin:teams_team_change", args=[team.pk])
    data = _form_data(admin_client_as_root.get(url))
    rows = {data[f"memberships-{i}-id"]: i for i in range(int(data["memberships-TOTAL_FORMS"]))}
    viewer_row = rows[Membership.objects.get(user=viewer).pk]
    responder_row = rows[Membership.objects.get(user=responder).pk]
    data[f"memberships-{viewer_row}-role"] = Role.RESPONDER
    data[f"memberships-{responder_row}-DELETE"] = "on"
    new = len(rows)
    data["memberships-TOTAL_FORMS"] = str(new + 1)
    data[f"memberships-{new}-team"] = str(team.pk)
    data[f"memberships-{new}-user"] = str(newcomer.pk)
    data[f"memberships-{new}-role"] = Role.COMMANDER
    response = admin_client_as_root.post(url, data)
    assert response.status_code == 302, response.context and response.context["errors"]
    got = {(e.action, e.actor_name, e.team_id) for e in _entries(data__via="admin")}
    assert got == {
        ("member.role", "root", team.pk),
        ("member.remove", "root", team.pk),
        ("member.add", "root", team.pk),
    }
    (role,) = _entries(action="member.role")
    assert role.data["changed"] == {"role": ["viewer", "responder"]}
    (removed,) = _entries(action="member.remove")
    assert removed.object_id and removed.object_id != "None"
    assert "remi-responder" in removed.summary
    (added,) = _entries(action="member.add")
    assert "nina-new" in added.summary and added.data["values"]["role"] == "commander"


def test_a_bulk_delete_of_memberships_in_the_admin_is_audited(
    admin_client_as_root, team, commander, viewer, responder
):
    doomed = list(
        Membership.objects.filter(user__in=[viewer, responder]).values_list("pk", flat=True)
    )
    response = admin_client_as_root.post(
        reverse("admin:teams_membership_changelist"),
        {"action": "delete_selected", "_selected_action": doomed, "post": "yes"},
    )
    assert response.status_code == 302
    assert not Membership.objects.filter(pk__in=doomed).exists()
    entries = _entries(action="member.remove")
    assert sorted(e.object_id for e in entries) == sorted(str(pk) for pk in doomed)
    assert {(e.actor_name, e.team_id) for e in entries} == {("root", team.pk)}


def test_making_a_user_superuser_in_the_admin_is_audited_without_the_password_hash(
    admin_client_as_root, root, viewer
):
    url = reverse("admin:auth_user_change", args=[viewer.pk])
    data = _form_data(admin_client_as_root.get(url))
    data.update(is_staff="on", is_superuser="on")
    response = admin_client_as_root.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    viewer.refresh_from_db()
    assert viewer.is_superuser
    (entry,) = _entries(action="user.update")
    assert entry.actor == root and entry.object_id == str(viewer.pk)
    # (The admin's split date widget also drops date_joined's microseconds: recorded too.)
    changed = entry.data["changed"]
    assert changed["is_staff"] == changed["is_superuser"] == ["False", "True"]
    assert viewer.password not in str(AuditEntry.objects.values_list("data", "summary"))


def test_a_deployment_changed_in_the_admin_is_audited(admin_client_as_root, team, deployment):
    url = reverse("admin:deployments_deployment_change", args=[deployment.pk])
    data = _form_data(admin_client_as_root.get(url))
    data["name"] = "atlas-renamed"
    response = admin_client_as_root.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    (entry,) = _entries(action="deployment.update", data__via="admin")
    assert entry.team_id == team.pk
    assert entry.data["changed"]["name"] == ["atlas-prod", "atlas-renamed"]


def test_a_password_set_on_the_admins_password_page_is_audited_without_the_hash(
    admin_client_as_root, root, viewer
):
    url = reverse("admin:auth_user_password_change", args=[viewer.pk])
    new = "a brand new long password 42"
    response = admin_client_as_root.post(
        url, {"password1": new, "password2": new, "usable_password": "true"}
    )
    assert response.status_code == 302, response.context and response.context["form"].errors
    viewer.refresh_from_db()
    assert viewer.check_password(new)
    (entry,) = _entries(action="user.update")
    assert (entry.actor, entry.object_id) == (root, str(viewer.pk))
    assert "Password of vic-viewer" in entry.summary
    assert viewer.password not in str(AuditEntry.objects.values_list("data", "summary"))
