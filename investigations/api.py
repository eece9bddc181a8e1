"""The JSON API and the Alertmanager webhook: token-authenticated, no session, no CSRF.

Every request carries ``Authorization: Bearer atl_...`` (a team's API token); a
missing, wrong or revoked token is 401, a body that is not the expected JSON is 400
with the reason, and a token never reaches another team's rows (404).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from audit.actor import Actor
from audit.text import safe_json
from deployments.models import Deployment
from investigations import actions, live
from investigations.choices import EventKind, NodeState
from investigations.diagnose import evaluation_json
from investigations.evidence import frozen_evidence
from investigations.frozen import verification_facts
from investigations.models import Investigation, TimelineEvent
from investigations.playbook import PlaybookError, get_playbook, playbooks
from investigations.timeline import record_event
from investigations.tokens import authenticate

logger = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
MAX_ALERTS = 100
# Alert names that mean a symptom without an ``atlas_symptom`` label.
ALERT_SYMPTOMS = {
    "AtlasHighTTFT": "high-ttft",
    "AtlasGPUOOM": "gpu-oom",
    "AtlasITLSpikes": "itl-spikes",
    "AtlasLowGPUUtilisation": "low-gpu-utilisation",
    "AtlasThroughputDrop": "throughput-drop",
}


class BadRequest(Exception):
    pass


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def token_required(view: Callable) -> Callable:
    @login_not_required
    @csrf_exempt
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        token = authenticate(request.headers.get("Authorization", ""))
        if token is None:
            response = _error(401, "missing, invalid or revoked API token")
            response["WWW-Authenticate"] = 'Bearer realm="atlas"'
            return response
        try:
            return view(request, token, *args, **kwargs)
        except BadRequest as exc:
            return _error(400, str(exc))

    return wrapper


def _json_body(request: HttpRequest) -> dict:
    if len(request.body) > MAX_BODY:
        raise BadRequest(f"body larger than {MAX_BODY} bytes")
    try:
        # Every string in the body, keys too, with NUL and lone surrogates made safe here,
        # at the one door JSON comes in by (audit.text; issue 19.5).
        data = safe_json(json.loads(request.body or b"null"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    except RecursionError:  # "[" * 100_000 fits in MAX_BODY; json raises this, not ValueError
        raise BadRequest("body is not JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    return data


def _text(data: dict, name: str, *, limit: int = 200, required: bool = True) -> str:
    value = data.get(name, "")
    if not isinstance(value, str) or (required and not value.strip()) or len(value) > limit:
        raise BadRequest(f"{name!r} must be a string of at most {limit} characters")
    return value.strip()


def _deployment(token, name: str) -> Deployment:
    deployment = Deployment.objects.filter(team=token.team, name=name).first()
    if deployment is None:
        raise BadRequest(f"no deployment named {name!r} in this token's team")
    return deployment


def _investigation_json(request, investigation: Investigation) -> dict:
    """The evaluation (the automation's suggestions) and, beside it, what people did:
    decisions, the recorded fix, its verification and the cause they settled on.

    ``root_cause`` is the cause a person (or an auto-apply rule) confirmed, never the
    automation's guess, which is ``suggested_root_cause``: a suggestion is never a
    decision, so a script reading ``root_cause`` sees null until someone confirms one, and
    the confirmed cause once they have (issue 17: it read null after a person confirmed).
    """
    state = live.current_state(investigation)
    evaluation = evaluation_json(state.result)
    confirmed = [n.key for n in state.result.nodes if n.state == NodeState.CONFIRMED]
    fix = state.fix
    if investigation.status == Investigation.Status.CLOSED:
        root_cause = investigation.root_cause or None
        verification = (investigation.closing_facts or {}).get("verification")
    else:
        root_cause = fix.node if fix is not None else (confirmed[0] if confirmed else None)
        verification = verification_facts(state.verification)
    return {
        "id": str(investigation.pk),
        "url": request.build_absolute_uri(
            reverse("investigations:detail", args=[investigation.pk])
        ),
        "symptom": investigation.symptom,
        "deployment": investigation.deployment.name,
        "status": investigation.status,
        "title": investigation.title,
        "opened_at": investigation.opened_at.isoformat(),
        "opened_by": investigation.opened_by_name or None,
        "closed_at": investigation.closed_at.isoformat() if investigation.closed_at else None,
        **evaluation,
        "suggested_root_cause": evaluation["root_cause"],
        "suggested_fix": evaluation["fix"],
        "root_cause": root_cause,
        "confirmed": confirmed,
        "decisions": _decisions_json(investigation),
        "recorded_fix": _fix_json(fix),
        "verification": verification,
    }


def _decisions_json(investigation: Investigation) -> list[dict]:
    """Every decision in order, with who made it: the person, else the name the timeline
    stored for the actor (an API token by name, the automatic rule)."""
    names = {
        str(data.get("decision")): name
        for data, name in TimelineEvent.objects.filter(
            investigation=investigation, kind=EventKind.DECISION
        ).values_list("data", "actor_name")
    }
    return [
        {
            "sequence": d.sequence,
            "node": d.node,
            "action": d.action,
            "reason": d.reason,
            "automatic": d.automatic,
            "by": (
                d.decided_by.get_username()
                if d.decided_by is not None
                else names.get(str(d.pk)) or ("automatic rule" if d.automatic else "automation")
            ),
            "at": d.decided_at.isoformat(),
        }
        for d in investigation.decisions.select_related("decided_by").order_by("sequence")
    ]


def _fix_json(fix) -> dict | None:
    if fix is None:
        return None
    return {
        "node": fix.node,
        "key": fix.key,
        "parameters": fix.parameters,
        "note": fix.note,
        "applied_by": fix.applied_by.get_username() if fix.applied_by else None,
        "applied_at": fix.applied_at.isoformat(),
    }


@token_required
@require_http_methods(["POST"])
def open_investigation(request: HttpRequest, token) -> JsonResponse:
    data = _json_body(request)
    symptom = _text(data, "symptom", limit=64)
    if symptom not in playbooks():
        raise BadRequest(f"unknown symptom {symptom!r}; known: {', '.join(sorted(playbooks()))}")
    deployment = _deployment(token, _text(data, "deployment", limit=100))
    investigation = actions.open_investigation(
        deployment=deployment,
        symptom=symptom,
        user=Actor.for_token(token),
        title=_text(data, "title", required=False),
    )
    return JsonResponse(_investigation_json(request, investigation), status=201)


@token_required
@require_http_methods(["GET"])
def investigation(request: HttpRequest, token, investigation_id) -> JsonResponse:
    found = Investigation.objects.filter(pk=investigation_id, team=token.team).first()
    if found is None:
        return _error(404, "no such investigation")
    return JsonResponse(_investigation_json(request, found))


@token_required
@require_http_methods(["POST"])
def decide(request: HttpRequest, token, investigation_id) -> JsonResponse:
    found = Investigation.objects.filter(pk=investigation_id, team=token.team).first()
    if found is None:
        return _error(404, "no such investigation")
    data = _json_body(request)
    node_key = _text(data, "node", limit=64)
    try:
        node = live.current_state(found).result.find(node_key)
    except KeyError:
        raise BadRequest(f"{node_key!r} is not a hypothesis of this investigation") from None
    expected = data.get("expected_state")
    if expected is not None and expected not in tuple(NodeState):
        raise BadRequest("expected_state must be open, confirmed or eliminated")
    try:
        decision = actions.decide(
            investigation=found,
            node=node_key,
            action=_text(data, "action", limit=16),
            reason=_text(data, "reason", limit=4000),
            user=Actor.for_token(token),
            evidence=frozen_evidence(node),
            expected_state=expected,
        )
    except (actions.DecisionConflict, actions.InvestigationClosed) as exc:
        return _error(409, str(exc))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return JsonResponse(
        {"decision": str(decision.pk), "node": node_key, "sequence": decision.sequence},
        status=201,
    )


@token_required
@require_http_methods(["POST"])
def alertmanager(request: HttpRequest, token) -> JsonResponse:
    """Alertmanager's webhook (version 4): each firing alert opens an investigation, or
    is folded into the open one it belongs to (same fingerprint, else same deployment and
    symptom); each resolved alert becomes a timeline event there (``_one_alert``).

    Each alert is handled on its own, in its own transaction: one that cannot be handled
    is reported under ``failed`` with its reason, and the others are processed. The answer
    is 200 whenever anything was written, because Alertmanager retries a failed
    notification whole: a 500 for one bad alert once kept the later alerts from ever
    opening and folded the earlier ones twice (issue 19.5). Only when every alert failed
    on the database, so nothing was written, is the answer 503, worth a retry.
    """
    data = _json_body(request)
    alerts = data.get("alerts")
    if not isinstance(alerts, list) or len(alerts) > MAX_ALERTS:
        raise BadRequest(f"'alerts' must be a list of at most {MAX_ALERTS} alerts")
    done: dict[str, list] = {
        "opened": [],
        "deduplicated": [],
        "resolved": [],
        "skipped": [],
        "failed": [],
    }
    database_failures = 0
    for index, alert in enumerate(alerts):
        fingerprint = str(alert.get("fingerprint", ""))[:64] if isinstance(alert, dict) else ""
        try:
            with transaction.atomic():
                outcome, detail = _one_alert(token, data, alert)
        except BadRequest as exc:
            outcome, detail = "failed", _failed(index, fingerprint, str(exc))
        except DatabaseError as exc:
            logger.exception("alert %d of a notification was not stored", index)
            database_failures += 1
            outcome, detail = "failed", _failed(index, fingerprint, type(exc).__name__)
        done[outcome].append(detail)
    status = 503 if alerts and database_failures == len(alerts) else 200
    return JsonResponse(done, status=status)


def _failed(index: int, fingerprint: str, reason: str) -> dict:
    return {"index": index, "fingerprint": fingerprint, "reason": reason}


def _one_alert(token, data: dict, alert) -> tuple[str, object]:
    """One alert of a notification: (outcome, what to report) or BadRequest.

    Where an alert belongs (``_folded_into``) is the same rule for firing and resolved
    alerts: the open investigation this fingerprint opened or was folded into, else the
    open investigation of the same deployment and symptom, whoever opened it (a person,
    a token, another alert). A firing alert with nowhere to go opens one; a resolved one
    becomes a timeline event where it belongs, once.
    """
    if not isinstance(alert, dict) or not isinstance(alert.get("labels"), dict):
        raise BadRequest("each alert needs a 'labels' object")
    labels = {str(k)[:100]: str(v)[:200] for k, v in alert["labels"].items()}
    fingerprint = str(alert.get("fingerprint", ""))[:64]
    status = alert.get("status", data.get("status"))
    if status not in ("firing", "resolved"):
        return "skipped", {"fingerprint": fingerprint, "reason": "not firing"}
    symptom = labels.get("atlas_symptom") or ALERT_SYMPTOMS.get(labels.get("alertname", ""))
    try:
        get_playbook(symptom or "")
    except PlaybookError:
        return "skipped", {"fingerprint": fingerprint, "reason": "no symptom for this alert"}
    # Locked: two notifications for one deployment at once (Alertmanager's groups run in
    # parallel) are serialised here, so the second sees the investigation the first opened.
    deployment = (
        Deployment.objects.select_for_update()
        .filter(team=token.team, name=labels.get("atlas_deployment", ""))
        .first()
    )
    if deployment is None:
        return "skipped", {"fingerprint": fingerprint, "reason": "unknown atlas_deployment"}
    existing = _folded_into(token, deployment, str(symptom), fingerprint)
    alertname = labels.get("alertname", "?")
    event = {"labels": labels, "fingerprint": fingerprint, "status": status}
    if status == "resolved":
        if existing is None:
            return "skipped", {"fingerprint": fingerprint, "reason": "no open investigation"}
        if _already_resolved(existing, fingerprint):
            return "deduplicated", str(existing.pk)
        record_event(
            existing,
            EventKind.ALERT,
            actor=Actor.for_token(token),
            summary=f"Alert {alertname} resolved",
            data={**event, "ends_at": str(alert.get("endsAt", ""))[:64]},
        )
        return "resolved", str(existing.pk)
    if existing is not None:
        again = existing.alert_fingerprint == fingerprint
        record_event(
            existing,
            EventKind.ALERT,
            actor=Actor.for_token(token),
            summary=f"Alert {alertname} fired again" if again else f"Alert {alertname} fired",
            data=event,
        )
        if fingerprint and not existing.alert_fingerprint:
            # The first alert folded into a person's investigation is its alert from now on.
            existing.alert_fingerprint = fingerprint
            existing.save(update_fields=["alert_fingerprint"])
        return "deduplicated", str(existing.pk)
    annotations = alert.get("annotations")
    summary = annotations.get("summary", "") if isinstance(annotations, dict) else ""
    investigation = actions.open_investigation(
        deployment=deployment,
        symptom=symptom,
        user=None,
        title=str(summary)[:200],
        fingerprint=fingerprint,
        opened_by_text=f"alert {alertname}",
    )
    return "opened", str(investigation.pk)


def _folded_into(token, deployment: Deployment, symptom: str, fingerprint: str):
    """The open investigation an alert belongs to, locked, or None (see ``_one_alert``).

    The fingerprint is matched first, on the investigation's own alert or on an alert
    event folded into it, so an alert whose labels changed still lands where it did."""
    open_ = Investigation.objects.select_for_update().filter(
        team=token.team, status=Investigation.Status.OPEN
    )
    if fingerprint:
        found = open_.filter(alert_fingerprint=fingerprint).first()
        if found is None:
            folded = (
                TimelineEvent.objects.filter(
                    investigation__team=token.team,
                    investigation__status=Investigation.Status.OPEN,
                    kind=EventKind.ALERT,
                    data__fingerprint=fingerprint,
                )
                .order_by("-at", "-pk")
                .values_list("investigation_id", flat=True)
                .first()
            )
            found = open_.filter(pk=folded).first() if folded else None
        if found is not None:
            return found
    return open_.filter(deployment=deployment, symptom=symptom).order_by("opened_at").first()


def _already_resolved(investigation: Investigation, fingerprint: str) -> bool:
    """Whether this alert's latest event there already says resolved: Alertmanager repeats
    a resolved notification (retries, the group's other alerts), the timeline should not."""
    last = (
        TimelineEvent.objects.filter(
            investigation=investigation, kind=EventKind.ALERT, data__fingerprint=fingerprint
        )
        .order_by("-at", "-pk")
        .values_list("data", flat=True)
        .first()
    )
    return bool(last) and last.get("status") == "resolved"
