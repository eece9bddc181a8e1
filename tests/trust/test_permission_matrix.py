"""The permission matrix, generated from the URL resolver.

Every URL pattern Django serves is walked (``get_resolver()``); each must have an entry in
``MATRIX`` (or live in the admin, whose every view is wrapped by ``admin_view`` and is
checked by one rule). A pattern added later without an entry fails
``test_every_url_pattern_is_classified`` with the line to add.

For each pattern and method, each actor of the cast (tests/conftest.py) makes a real
request through the whole middleware stack, with the path filled with real rows of
``team``: anonymous -> login redirect, outsider (commander of another team) -> 404,
members -> 403 below the role the action needs, and the exact status the view answers
when allowed. Every actor runs in a savepoint that is rolled back, so each sees the same
rows; a refused request must leave the team's rows and audit log exactly as they were.
Token endpoints (JSON API, Alertmanager webhook) are tried with no, a malformed, a wrong,
a revoked and another team's token, with a session and no token, and with the team's own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import pytest
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.core.files.base import ContentFile
from django.core.signals import request_finished
from django.db import close_old_connections, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from django.utils import timezone

from artifacts.models import Artifact
from audit.models import AuditEntry
from comms.models import ChatWebhook, StatusUpdate
from deployments.budget import Budget
from deployments.models import ControllerKind, Deployment, EngineController
from drills.models import Drill, DrillRange
from investigations import tokens
from investigations.models import Decision, FixRecord, Investigation, RoleAssignment
from postmortems.models import ActionItem, Export, Postmortem, PostmortemVersion
from probes.models import Target, TargetKind
from review.models import ReviewComment
from teams import actions as team_actions
from teams.models import Invitation, Membership, Role
from tests.support import builders

ANON, OUTSIDER, VIEWER, RESPONDER, COMMANDER = (
    "anonymous",
    "outsider",
    "viewer",
    "responder",
    "commander",
)
ACTORS = (ANON, OUTSIDER, VIEWER, RESPONDER, COMMANDER)
MEMBERS = (VIEWER, RESPONDER, COMMANDER)
LOGIN = "login"  # 302 to settings.LOGIN_URL?next=...
ADMIN_LOGIN = "admin-login"  # 302 to the admin's own login page
RANK = {VIEWER: 0, RESPONDER: 1, COMMANDER: 2}


def members(minimum: str, ok: int) -> dict[str, object]:
    """A team-scoped action: outsiders 404, members below ``minimum`` 403."""
    expected: dict[str, object] = {ANON: LOGIN, OUTSIDER: 404}
    for actor in MEMBERS:
        expected[actor] = ok if RANK[actor] >= RANK[minimum] else 403
    return expected


def signed_in(ok: int) -> dict[str, object]:
    """Any signed-in person (not team-scoped: their own list, a new team)."""
    return {ANON: LOGIN, **dict.fromkeys(ACTORS[1:], ok)}


def everyone(status: int) -> dict[str, object]:
    return dict.fromkeys(ACTORS, status)


NOT_ALLOWED = {ANON: LOGIN, **dict.fromkeys(ACTORS[1:], 405)}


@dataclass
class World:
    """Rows of ``team`` that path parameters and form data are filled from."""

    team: object
    other_team: object
    users: dict[str, object]
    deployment: Deployment
    target: Target
    investigation: Investigation
    viewer_membership: Membership
    token: str
    revoked_token: str
    other_token: str
    token_row: object
    artifact: Artifact
    item: ActionItem
    export: Export
    drill_range: DrillRange
    drill: Drill
    webhook: ChatWebhook
    invitation: Invitation
    extra: dict = field(default_factory=dict)


# Path parameter name -> the value filled in (always a row of ``team``).
PARAMS: dict[str, Callable[[World], object]] = {
    "team_id": lambda w: w.team.pk,
    "deployment_id": lambda w: w.deployment.pk,
    "investigation_id": lambda w: w.investigation.pk,
    "target_id": lambda w: w.target.pk,
    "member_id": lambda w: w.viewer_membership.pk,
    "token_id": lambda w: w.token_row.pk,
    "artifact_id": lambda w: w.artifact.pk,
    "item_id": lambda w: w.item.pk,
    "export_id": lambda w: w.export.pk,
    "range_id": lambda w: w.drill_range.pk,
    "drill_id": lambda w: w.drill.pk,
    "webhook_id": lambda w: w.webhook.pk,
    "invitation_id": lambda w: w.invitation.pk,
}


@dataclass(frozen=True)
class Page:
    """A browser endpoint (session + CSRF). ``data`` is the POST body."""

    get: dict = field(default_factory=lambda: NOT_ALLOWED)
    post: dict = field(default_factory=lambda: NOT_ALLOWED)
    data: Callable[[World], dict] = lambda w: {}
    query: Callable[[World], str] = lambda w: ""


@dataclass(frozen=True)
class Api:
    """A token endpoint: no session, no CSRF, ``Authorization: Bearer atl_...``."""

    method: str
    ok: int  # with the team's own token
    other_team: int  # with another team's valid token: never the team's rows
    body: Callable[[World], bytes] = lambda w: b"{}"
    content_type: str = "application/json"
    query: str = ""


def _json(value: Callable[[World], object]) -> Callable[[World], bytes]:
    return lambda w: json.dumps(value(w)).encode()


def _deployment_form(name: str) -> dict:
    return {"name": name, "engine": "vllm", "poll_interval_s": 5, **asdict(Budget())}


NODE = "kv-cache-pressure"  # a hypothesis of the high-ttft playbook with a fix and an alert

MATRIX: dict[str, Page | Api] = {
    # Project pages.
    "home": Page(get=signed_in(200)),
    "healthz": Page(get=everyone(200), post=everyone(405)),
    "workers_partial": Page(get=signed_in(200)),
    "login": Page(get=everyone(200), post=everyone(200)),  # empty form: re-shown with errors
    "logout": Page(get=NOT_ALLOWED, post=signed_in(302)),
    "password_change": Page(get=signed_in(200), post=signed_in(200)),
    "password_change_done": Page(get=signed_in(200)),
    # Single sign-on: routed always, 404 to everyone while it is off (the default, as
    # here); tests/sso and tests/browser/test_sso_login.py hold them with SSO on.
    "sso:start": Page(get=everyone(404), post=everyone(404)),
    "sso:callback": Page(get=everyone(404), post=everyone(404)),
    # Teams.
    "teams:list": Page(get=signed_in(200)),
    "teams:create": Page(post=signed_in(302), data=lambda w: {"name": "Night shift"}),
    "teams:detail": Page(get=members(VIEWER, 200)),
    # Invitations (issue 19.12): commanders invite (the same 302 whoever is named);
    # only the invitee (here the outsider) may answer, everyone else gets 404.
    "teams:invite": Page(
        post=members(COMMANDER, 302),
        data=lambda w: {"invitee": "nobody-by-this-name", "role": Role.VIEWER},
    ),
    "teams:revoke_invitation": Page(post=members(COMMANDER, 302)),
    "teams:invitations": Page(get=signed_in(200)),  # only the person's own invitations
    "teams:accept_invitation": Page(
        post={ANON: LOGIN, OUTSIDER: 302, VIEWER: 404, RESPONDER: 404, COMMANDER: 404}
    ),
    "teams:decline_invitation": Page(
        post={ANON: LOGIN, OUTSIDER: 302, VIEWER: 404, RESPONDER: 404, COMMANDER: 404}
    ),
    "teams:change_role": Page(post=members(COMMANDER, 302), data=lambda w: {"role": "responder"}),
    "api:tokens": Page(
        get=members(COMMANDER, 200), post=members(COMMANDER, 200), data=lambda w: {"name": "ci"}
    ),
    "api:revoke_token": Page(post=members(COMMANDER, 302)),
    "teams:audit": Page(get=members(COMMANDER, 200)),
    # Deployments, targets, investigations.
    "deployments:create": Page(
        # Any team's commander may open the form; the team must be one they command.
        get={ANON: LOGIN, OUTSIDER: 200, VIEWER: 403, RESPONDER: 403, COMMANDER: 200},
        post={ANON: LOGIN, OUTSIDER: 400, VIEWER: 403, RESPONDER: 403, COMMANDER: 302},
        data=lambda w: {**_deployment_form("atlas-new"), "team_choice": str(w.team.pk)},
    ),
    "deployments:edit": Page(
        get=members(COMMANDER, 200),
        post=members(COMMANDER, 302),
        data=lambda w: {**_deployment_form(w.deployment.name), "tp_size": 8},
    ),
    "discovery:from_engine": Page(
        # As deployments:create; the engine URL is never fetched on create, only registered.
        get={ANON: LOGIN, OUTSIDER: 200, VIEWER: 403, RESPONDER: 403, COMMANDER: 200},
        post={ANON: LOGIN, OUTSIDER: 400, VIEWER: 403, RESPONDER: 403, COMMANDER: 302},
        data=lambda w: {
            **_deployment_form("atlas-from-engine"),
            "team_choice": str(w.team.pk),
            "step": "create",
            "urls": "http://127.0.0.1:8100",
            "target": "engine|r0|http://127.0.0.1:8100/metrics",
        },
    ),
    "discovery:prometheus": Page(
        get=members(COMMANDER, 200),
        # Nothing listens on the discard port: the page says so (200), nothing is saved.
        post=members(COMMANDER, 200),
        data=lambda w: {"step": "discover", "prometheus_url": "http://127.0.0.1:9"},
    ),
    "investigations:deployment": Page(get=members(VIEWER, 200)),
    "investigations:deployment_targets": Page(get=members(VIEWER, 200)),
    # The demo's incident clock: the world's deployment has a controller that shows it, on
    # the discard port, so a member sees the "cannot be read" panel (200).
    "investigations:simulator_clock": Page(get=members(VIEWER, 200)),
    "investigations:add_target": Page(
        post=members(COMMANDER, 302),
        data=lambda w: {"kind": "engine", "url": "http://127.0.0.1:8100/metrics", "replica": "r9"},
    ),
    "investigations:toggle_target": Page(post=members(COMMANDER, 302)),
    "investigations:open_from_home": Page(
        post=members(RESPONDER, 302),
        data=lambda w: {"deployment": str(w.deployment.pk), "symptom": "high-ttft"},
    ),
    "investigations:open": Page(
        post=members(RESPONDER, 302), data=lambda w: {"symptom": "gpu-oom"}
    ),
    "investigations:detail": Page(get=members(VIEWER, 200)),
    "investigations:tree": Page(get=members(VIEWER, 200)),
    "investigations:decide": Page(
        post=members(RESPONDER, 302),
        data=lambda w: {
            "node": "router-latency",
            "action": "eliminate",
            "reason": "router p95 is 4 ms",
            "expected_state": "open",
        },
    ),
    "investigations:record_fix": Page(post=members(RESPONDER, 302), data=lambda w: {"node": NODE}),
    "investigations:set_severity": Page(
        post=members(RESPONDER, 302), data=lambda w: {"severity": "sev2", "reason": "p95 x3"}
    ),
    # The world's investigation is commanded by nobody (created without the open action):
    # team commanders only. An incident commander who is a responder: tests/investigations.
    "investigations:set_status": Page(
        post=members(COMMANDER, 302), data=lambda w: {"status": "identified", "reason": "KV"}
    ),
    "investigations:assign_role": Page(
        post=members(COMMANDER, 302),
        data=lambda w: {"role": "scribe", "username": w.users[RESPONDER].username},
    ),
    "investigations:close": Page(
        post=members(COMMANDER, 302), data=lambda w: {"override": "matrix test"}
    ),
    "investigations:gate": Page(get=members(VIEWER, 200)),
    "investigations:audit": Page(get=members(VIEWER, 200)),
    # Artifacts.
    "artifacts:upload": Page(post=members(RESPONDER, 302)),
    "artifacts:list": Page(get=members(VIEWER, 200)),
    "artifacts:collect": Page(post=members(RESPONDER, 302)),
    "artifacts:detail": Page(get=members(VIEWER, 200)),
    # Postmortems.
    "postmortems:detail": Page(get=members(VIEWER, 200)),
    "postmortems:edit": Page(
        post=members(RESPONDER, 302),
        data=lambda w: {"base_version": "0", "summary": "What happened", "comment": "first"},
    ),
    "postmortems:add_action": Page(
        post=members(RESPONDER, 302),
        data=lambda w: {"title": "Alert on KV usage", "type": "detect", "owner_text": "SRE"},
    ),
    "postmortems:close_action": Page(post=members(RESPONDER, 302)),
    # The world's postmortem has no version yet and its investigation is open: each step
    # is refused with a message (302), after the role check (403 below it).
    "postmortems:request_review": Page(
        post=members(RESPONDER, 302), data=lambda w: {"version": "1"}
    ),
    "postmortems:publish": Page(post=members(COMMANDER, 302), data=lambda w: {"version": "1"}),
    "postmortems:exports": Page(get=members(VIEWER, 200)),
    "postmortems:export": Page(post=members(RESPONDER, 302), data=lambda w: {"format": "markdown"}),
    "postmortems:download": Page(get=members(VIEWER, 200)),
    # Review (the investigations helper's search, comments and statistics).
    "investigations:evidence": Page(get=members(VIEWER, 200)),
    "review:list": Page(get=signed_in(200)),  # lists only the person's own teams' rows
    "review:stats": Page(get=members(VIEWER, 200), query=lambda w: f"?team={w.team.pk}"),
    "review:detail": Page(get=members(VIEWER, 200)),
    "review:comment": Page(
        post=members(RESPONDER, 302), data=lambda w: {"body": "The KV budget was too small."}
    ),
    # Drills: practice incidents on a simulator range.
    "drills:list": Page(get=signed_in(200)),  # lists only the person's own teams' ranges
    "drills:start": Page(
        post=members(RESPONDER, 302),  # the range's simulator is unreachable: told, redirected
        data=lambda w: {"scenario": "random", "seed": "7"},
    ),
    "drills:detail": Page(get=members(VIEWER, 200)),
    "drills:finish": Page(post=members(RESPONDER, 302)),
    # Status updates and chat webhooks (comms).
    "comms:post_update": Page(
        post=members(RESPONDER, 302), data=lambda w: {"text": "Mitigating: fewer sequences"}
    ),
    "comms:webhooks": Page(
        get=members(COMMANDER, 200),
        post=members(COMMANDER, 302),
        data=lambda w: {"name": "ops", "kind": "slack", "url": "http://127.0.0.1:9/hook"},
    ),
    "comms:toggle_webhook": Page(post=members(COMMANDER, 302)),
    "comms:retry_webhook": Page(post=members(COMMANDER, 302)),
    # Token endpoints: the JSON API and the Alertmanager webhook.
    "api:open": Api(
        "POST",
        ok=201,
        other_team=400,  # "no deployment named ... in this token's team"
        body=_json(lambda w: {"symptom": "high-ttft", "deployment": w.deployment.name}),
    ),
    "api:investigation": Api("GET", ok=200, other_team=404),
    "api:decisions": Api(
        "POST",
        ok=201,
        other_team=404,
        body=_json(lambda w: {"node": "router-latency", "action": "eliminate", "reason": "4 ms"}),
    ),
    "api:alertmanager": Api(
        "POST",
        ok=200,
        other_team=200,  # answered, but the alert names no deployment of that team: skipped
        body=_json(
            lambda w: {
                "status": "firing",
                "alerts": [
                    {
                        "status": "firing",
                        "fingerprint": "f00d",
                        "labels": {
                            "alertname": "AtlasHighTTFT",
                            "atlas_deployment": w.deployment.name,
                        },
                    }
                ],
            }
        ),
    ),
    "artifacts:api_upload": Api(
        "POST",
        ok=202,
        other_team=404,
        body=lambda w: b'{"traceEvents": []}',
        content_type="application/octet-stream",
        query="?name=trace.json",
    ),
    "artifacts:api_artifact": Api("GET", ok=200, other_team=404),
}


# --- Walking the resolver --------------------------------------------------------------


def _walk(patterns, prefix: str = "", namespace: str = ""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            ns = ":".join(part for part in (namespace, entry.namespace) if part)
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern), ns)
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry, namespace


def _key(route: str, pattern: URLPattern, namespace: str) -> str:
    if pattern.name is None:
        return f"route:{route}"
    return f"{namespace}:{pattern.name}" if namespace else pattern.name


ROUTES: dict[str, tuple[str, URLPattern]] = {}
for _route, _pattern, _namespace in _walk(get_resolver().url_patterns):
    ROUTES.setdefault(_key(_route, _pattern, _namespace), (_route, _pattern))


def _is_admin(key: str) -> bool:
    return key.startswith("admin:") or key.startswith("route:admin/")


ADMIN_KEYS = sorted(k for k in ROUTES if _is_admin(k))
CLASSIFIED = sorted(k for k in ROUTES if k in MATRIX)
PAGE_KEYS = [k for k in CLASSIFIED if isinstance(MATRIX[k], Page)]
API_KEYS = [k for k in CLASSIFIED if isinstance(MATRIX[k], Api)]


def _fill(route: str, values: dict[str, object]) -> str:
    """The route with every converter and regex group replaced by its value."""

    def value(name: str) -> str:
        if name not in values:
            raise KeyError(
                f"path parameter {name!r} of {route!r} has no value: add it to PARAMS in "
                "tests/trust/test_permission_matrix.py"
            )
        return str(values[name])

    path = re.sub(r"\(\?P<(\w+)>(?:[^()]|\([^()]*\))*\)", lambda m: value(m.group(1)), route)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: value(m.group(1)), path)
    return "/" + path.replace("^", "").replace("$", "")


def _path(key: str, world: World) -> str:
    route, pattern = ROUTES[key]
    names = re.findall(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>", route)
    values = {name: PARAMS[name](world) for pair in names for name in pair if name in PARAMS}
    path = _fill(route, {**values, **world.extra})
    match = resolve(path)
    assert match.func is pattern.callback, f"{path} resolves to {match.view_name}, not {key}"
    return path


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    """The cast's passwords are hashed once per test; the matrix makes thousands of users."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# --- The cast's rows ----------------------------------------------------------------------


@pytest.fixture
def world(team, other_team, commander, responder, viewer, outsider, settings, tmp_path) -> World:
    settings.MEDIA_ROOT = tmp_path / "media"
    deployment = builders.deployment(team)
    target = builders.target(deployment, TargetKind.ENGINE, "http://127.0.0.1:8100/metrics")
    EngineController.objects.create(
        deployment=deployment,
        kind=ControllerKind.ENGINESIM,
        url="http://127.0.0.1:9",  # discard port: nothing listens
        shows_clock=True,
    )
    investigation = Investigation.objects.create(
        team=team, deployment=deployment, symptom="high-ttft", opened_by=commander
    )
    FixRecord.objects.create(
        investigation=investigation,
        node=NODE,
        key="fewer-max-num-seqs",
        parameters={"max_num_seqs": 30},
        applied_by=commander,
    )
    token_row, token = tokens.create_token(team=team, name="alerts", user=commander)
    revoked_row, revoked = tokens.create_token(team=team, name="old", user=commander)
    revoked_row.revoked_at = revoked_row.created_at
    revoked_row.save(update_fields=["revoked_at"])
    _, other = tokens.create_token(team=other_team, name="theirs", user=outsider)
    artifact = Artifact.objects.create(
        team=team,
        deployment=deployment,
        investigation=investigation,
        name="trace.json",
        file=ContentFile(b"{}", name="trace.json"),
        size_bytes=2,
        sha256="0" * 64,
        source="upload",
        status="done",
        analysis={"findings": []},
        captured_at=timezone.now(),
    )
    postmortem = Postmortem.objects.create(team=team, investigation=investigation)
    item = ActionItem.objects.create(
        postmortem=postmortem, title="Alert on KV usage", type="detect", created_by=commander
    )
    export = Export.objects.create(
        team=team, postmortem=postmortem, format="markdown", status="done", created_by=commander
    )
    export.file.save("postmortem.md", ContentFile(b"# Postmortem\n"))
    drill_range = DrillRange.objects.create(
        team=team,
        deployment=builders.deployment(team, "drill-range"),
        simulator_url="http://127.0.0.1:9",  # discard port: nothing listens
    )
    drill = Drill.objects.create(
        range=drill_range,
        investigation=Investigation.objects.create(
            team=team, deployment=drill_range.deployment, symptom="high-ttft", is_drill=True
        ),
        scenario="kv-cache-pressure",
        truth_causes=["kv-cache-pressure"],
        seed=7,
        started_by=commander,
    )
    return World(
        team=team,
        other_team=other_team,
        users={
            OUTSIDER: outsider,
            VIEWER: viewer,
            RESPONDER: responder,
            COMMANDER: commander,
        },
        deployment=deployment,
        target=target,
        investigation=investigation,
        viewer_membership=Membership.objects.get(team=team, user=viewer),
        token=token,
        revoked_token=revoked,
        other_token=other,
        token_row=token_row,
        artifact=artifact,
        item=item,
        export=export,
        drill_range=drill_range,
        drill=drill,
        webhook=ChatWebhook.objects.create(
            team=team, name="ops-room", kind="slack", url="http://127.0.0.1:9/hook"
        ),
        invitation=_invitation(team, outsider, commander),
    )


def _invitation(team, invitee, by) -> Invitation:
    with transaction.atomic():
        return team_actions.invite(team=team, invitee=invitee.username, role=Role.VIEWER, by=by)


def _state(world: World) -> tuple:
    """What a refused request must not change."""
    team = world.team
    return (
        AuditEntry.objects.filter(team=team).count(),
        Investigation.objects.filter(team=team, status="open").count(),
        Decision.objects.filter(investigation__team=team).count(),
        FixRecord.objects.filter(investigation__team=team).count(),
        sorted(Membership.objects.filter(team=team).values_list("user_id", "role")),
        sorted(Target.objects.filter(deployment__team=team).values_list("url", "enabled")),
        world.team.api_tokens.filter(revoked_at__isnull=True).count(),
        sorted(
            PostmortemVersion.objects.filter(postmortem__team=team).values_list(
                "number", "review_state", "reviewer_name"
            )
        ),
        ActionItem.objects.filter(postmortem__team=team, status="open").count(),
        Export.objects.filter(team=team).count(),
        Artifact.objects.filter(team=team).count(),
        ReviewComment.objects.filter(investigation__team=team).count(),
        Drill.objects.filter(range__team=team, finished_at__isnull=True).count(),
        StatusUpdate.objects.filter(investigation__team=team).count(),
        sorted(
            Investigation.objects.filter(team=team).values_list("pk", "severity", "incident_status")
        ),
        sorted(
            RoleAssignment.objects.filter(investigation__team=team).values_list(
                "role", "user_name", "ended_at"
            )
        ),
        sorted(ChatWebhook.objects.filter(team=team).values_list("name", "enabled")),
        sorted(Invitation.objects.filter(team=team).values_list("invitee", "role", "status")),
    )


def _outcome(response) -> object:
    """The response in the matrix's terms: LOGIN / ADMIN_LOGIN for those redirects, else
    the status code."""
    location = response.get("Location", "")
    if response.status_code == 302:
        if location.startswith(reverse("login") + "?next="):
            return LOGIN
        if location.startswith(reverse("admin:login") + "?next="):
            return ADMIN_LOGIN
    return response.status_code


def _close(response) -> None:
    """Close a streamed response's file without the request_finished signal, which would
    close the test's database connection (Django's test client does the same)."""
    if response.streaming:
        request_finished.disconnect(close_old_connections)
        try:
            response.close()
        finally:
            request_finished.connect(close_old_connections)


def _client(world: World, actor: str) -> Client:
    client = Client()
    if actor != ANON:
        client.force_login(world.users[actor])
    return client


# --- The tests ---------------------------------------------------------------------------


def test_every_url_pattern_is_classified():
    missing = [
        f"{key}  ({ROUTES[key][0]} -> {ROUTES[key][1].lookup_str})"
        for key in sorted(ROUTES)
        if key not in MATRIX and not _is_admin(key)
    ]
    assert not missing, (
        "URL patterns without a permission-matrix entry; classify each in MATRIX in "
        "tests/trust/test_permission_matrix.py (who may GET/POST it, which status):\n  "
        + "\n  ".join(missing)
    )


def test_the_matrix_has_no_entries_for_urls_that_are_gone():
    assert sorted(set(MATRIX) - set(ROUTES)) == []


def test_the_walk_sees_every_app():
    namespaces = {key.split(":")[0] for key in ROUTES if ":" in key}
    expected = {"teams", "deployments", "investigations", "api", "artifacts", "postmortems"}
    assert expected | {"review", "drills", "discovery", "sso"} <= namespaces
    assert len(PAGE_KEYS) + len(API_KEYS) == len(MATRIX)


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("key", PAGE_KEYS)
def test_page_permissions(world, key, method):
    spec = MATRIX[key]
    expected = spec.get if method == "GET" else spec.post
    path = _path(key, world)
    got, broke = {}, []
    for actor in ACTORS:
        with transaction.atomic():
            before = _state(world)
            client = _client(world, actor)
            if method == "GET":
                response = client.get(path + spec.query(world))
            else:
                response = client.post(path, spec.data(world))
            got[actor] = _outcome(response)
            _close(response)
            if got[actor] in (LOGIN, 401, 403, 404, 405) and _state(world) != before:
                broke.append(actor)
            transaction.set_rollback(True)
    assert got == expected, f"{method} {path} ({key})"
    assert broke == [], f"{method} {path}: refused requests changed the team's rows: {broke}"


TOKEN_CASES = ("none", "not bearer", "malformed", "wrong", "revoked", "session only", "other team")


def _headers(world: World, case: str) -> dict[str, str]:
    return {
        "none": {},
        "not bearer": {"HTTP_AUTHORIZATION": f"Basic {world.token}"},
        "malformed": {"HTTP_AUTHORIZATION": "Bearer " + "x" * 300},
        "wrong": {"HTTP_AUTHORIZATION": "Bearer " + world.token[:-4] + "AAAA"},
        "revoked": {"HTTP_AUTHORIZATION": f"Bearer {world.revoked_token}"},
        "session only": {},
        "other team": {"HTTP_AUTHORIZATION": f"Bearer {world.other_token}"},
        "own": {"HTTP_AUTHORIZATION": f"Bearer {world.token}"},
    }[case]


def _api_call(world: World, spec: Api, path: str, case: str, method: str | None = None):
    client = _client(world, COMMANDER if case == "session only" else ANON)
    method = method or spec.method
    url = path + spec.query
    if method == "GET":
        return client.get(url, **_headers(world, case))
    return client.post(
        url, spec.body(world), content_type=spec.content_type, **_headers(world, case)
    )


@pytest.mark.parametrize("key", API_KEYS)
def test_token_endpoint_permissions(world, key):
    spec = MATRIX[key]
    path = _path(key, world)
    got, broke = {}, []
    for case in (*TOKEN_CASES, "own"):
        with transaction.atomic():
            before = _state(world)
            response = _api_call(world, spec, path, case)
            got[case] = response.status_code
            if case != "own" and _state(world) != before:
                broke.append(case)
            if response.status_code == 401:
                assert response["WWW-Authenticate"] == 'Bearer realm="atlas"'
            transaction.set_rollback(True)
    expected = {**dict.fromkeys(TOKEN_CASES, 401), "other team": spec.other_team, "own": spec.ok}
    assert got == expected, f"{spec.method} {path} ({key})"
    assert broke == [], f"{path}: these tokens changed the team's rows: {broke}"


@pytest.mark.parametrize("key", API_KEYS)
def test_token_endpoints_refuse_the_other_method(world, key):
    spec = MATRIX[key]
    other = "GET" if spec.method == "POST" else "POST"
    response = _api_call(world, spec, _path(key, world), "own", method=other)
    assert response.status_code == 405


def test_the_webhook_never_opens_an_investigation_for_another_teams_token(world):
    spec = MATRIX["api:alertmanager"]
    response = _api_call(world, spec, reverse("api:alertmanager"), "other team")
    assert response.json()["opened"] == []
    assert response.json()["skipped"][0]["reason"] == "unknown atlas_deployment"


# --- The admin: one rule for every pattern admin.site serves -------------------------------


def _admin_values(world: World, key: str) -> dict[str, object]:
    """Real ids for the admin's path parameters."""
    route = ROUTES[key][0]
    values: dict[str, object] = {
        "app_label": "teams",
        "url": "no-such-page/",
        "content_type_id": ContentType.objects.get_for_model(type(world.team)).pk,
        "id": world.users[COMMANDER].pk,
        "object_id": world.team.pk,
    }
    for model in admin.site._registry:
        meta = model._meta
        if route.startswith(f"admin/{meta.app_label}/{meta.model_name}/"):
            row = model._default_manager.order_by("pk").first()
            values["object_id"] = row.pk if row is not None else 0
    return values


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "x" * 20)


@pytest.mark.parametrize("key", ADMIN_KEYS)
def test_admin_pages_are_for_staff_only(world, key, superuser):
    """Anonymous people land on a login page and every team role (none is staff) on the
    admin's, for GET and POST alike; a superuser gets the page (or the admin's own answer), never a
    login redirect or an error."""
    world.extra = _admin_values(world, key)
    path = _path(key, world)
    got = {}
    for actor in ACTORS:
        for method in ("GET", "POST"):
            with transaction.atomic():
                client = _client(world, actor)
                response = client.get(path) if method == "GET" else client.post(path, {})
                got[(actor, method)] = _outcome(response)
                transaction.set_rollback(True)
    # Anonymous: the site's login (LoginRequiredMiddleware) or the admin's, by view.
    anonymous = {got[(ANON, "GET")], got[(ANON, "POST")]}
    assert anonymous <= ({200} if key == "admin:login" else {LOGIN, ADMIN_LOGIN, 302}), got
    if key != "admin:logout":
        assert 302 not in anonymous, got
    signed_in_outcomes = {v for (actor, _), v in got.items() if actor != ANON}
    # The login page answers everyone; logging out (of the site) discloses nothing.
    allowed = {"admin:login": {200}, "admin:logout": {302, 405}}.get(key, {ADMIN_LOGIN})
    assert signed_in_outcomes <= allowed, got
    client = Client()
    client.force_login(superuser)
    response = client.get(path)
    assert _outcome(response) not in (LOGIN, ADMIN_LOGIN)
    assert response.status_code < 500


# --- CSRF: every session write refuses a request without the token -------------------------


@pytest.mark.parametrize("key", [k for k in PAGE_KEYS if MATRIX[k].post != NOT_ALLOWED])
def test_every_session_write_needs_the_csrf_token(world, key):
    """The commander (or the first actor allowed) posting without the token gets Django's
    CSRF failure; with the token from the cookie in the header (what htmx sends from
    ``hx-headers``) the request gets the matrix's answer."""
    spec = MATRIX[key]
    actor = next(
        (a for a in (COMMANDER, OUTSIDER) if spec.post[a] not in (403, 404, 405)), COMMANDER
    )
    path = _path(key, world)
    with transaction.atomic():
        client = Client(enforce_csrf_checks=True)
        if actor != ANON:
            client.force_login(world.users[actor])
        before = _state(world)
        refused = client.post(path, spec.data(world))
        assert refused.status_code == 403, path
        assert b"CSRF" in refused.content
        assert _state(world) == before
        transaction.set_rollback(True)
    with transaction.atomic():
        client = Client(enforce_csrf_checks=True)
        client.force_login(world.users[actor])
        client.get(reverse("home"))  # sets the csrftoken cookie
        token = client.cookies["csrftoken"].value
        accepted = client.post(path, spec.data(world), HTTP_X_CSRFTOKEN=token)
        assert _outcome(accepted) == spec.post[actor], path
        transaction.set_rollback(True)


# --- Tokens at rest ------------------------------------------------------------------------


def test_tokens_are_stored_only_as_a_digest(world):
    import hashlib

    row = world.token_row
    row.refresh_from_db()
    stored = [str(getattr(row, f.attname)) for f in row._meta.concrete_fields]
    assert all(world.token not in value for value in stored)
    assert row.digest == hashlib.sha256(world.token.encode()).hexdigest()
    assert row.prefix == world.token[:12]


def test_the_token_check_is_constant_time(world, monkeypatch):
    """The final comparison goes through ``hmac.compare_digest`` (a spy that calls the
    real function), for a good and a wrong token alike."""
    import hmac

    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    assert tokens.authenticate(f"Bearer {world.token}") == world.token_row
    assert calls == [(world.token_row.digest, tokens.digest(world.token))]
    assert tokens.authenticate(f"Bearer {world.revoked_token}") is None
    assert len(calls) == 2  # compared, then refused for being revoked
