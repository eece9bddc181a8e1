"""Investigations to review, made with the domain actions (so the receivers that keep
search documents current see exactly what production writes)."""

from __future__ import annotations

import pytest
from django.db import connection

from investigations import actions
from investigations.playbook import get_playbook
from postmortems import actions as postmortem_actions
from tests.conftest import require_service
from tests.support.verification import verification_as


@pytest.fixture
def postgres(db):
    if connection.vendor != "postgresql":
        require_service("PostgreSQL", "full-text search needs DATABASE_URL=postgres://...")


def closed_incident(
    deployment, user, *, title, symptom="itl-spikes", root="gc-pauses", reason="", note="",
    narrative="", override="", drill=False,
):  # fmt: skip
    """Open, eliminate one branch, confirm ``root``, record its fix, close."""
    inv = actions.open_investigation(deployment=deployment, symptom=symptom, user=user, title=title)
    if drill:
        type(inv).objects.filter(pk=inv.pk).update(is_drill=True)
    other = next(k for k in get_playbook(symptom).causes() if k != root)
    actions.decide(
        investigation=inv, node=other, action="eliminate", reason="Ruled out by its own check",
        user=user, evidence={},
    )  # fmt: skip
    actions.decide(
        investigation=inv, node=root, action="confirm", reason=reason or "Confirmed by the trace",
        user=user, evidence={},
    )  # fmt: skip
    actions.record_fix(investigation=inv, node=root, parameters={}, user=user, note=note)
    if narrative:
        postmortem_actions.save_narrative(
            investigation=inv, sections={"narrative": narrative}, base_version=0, user=user
        )
    with verification_as("pending" if override else "passing"):
        return actions.close_investigation(investigation=inv, user=user, override=override)
