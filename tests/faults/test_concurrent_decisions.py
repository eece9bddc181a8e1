"""Two commanders deciding on the same hypothesis at the same moment: one wins cleanly, the
other is told, and neither decision is silently lost or overwritten.

Each commander is a thread with its own database connection and its own logged-in client,
posting the real decide form; a barrier releases both posts together. In CI this runs on
PostgreSQL, where ``select_for_update`` is what serialises them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections, transaction
from django.test import Client
from django.urls import reverse

from investigations import actions
from investigations.models import Decision, Investigation, TimelineEvent
from teams.models import Membership, Role
from tests.conftest import PASSWORD, require_service
from tests.support import builders
from tests.support.services import wait_until

NODE = "router-latency"
ROUNDS = 5


@pytest.fixture
def investigation(transactional_db, team, commander) -> Investigation:
    deployment = builders.deployment(team, "atlas-race")
    return actions.open_investigation(deployment=deployment, symptom="high-ttft", user=commander)


@pytest.fixture
def second_commander(django_user_model, team):
    user = django_user_model.objects.create_user(username="cole-commander", password=PASSWORD)
    Membership.objects.create(team=team, user=user, role=Role.COMMANDER)
    return user


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _poster(client: Client, investigation, action: str, start: threading.Barrier | None):
    url = reverse("investigations:decide", args=[investigation.pk])
    data = {
        "node": NODE,
        "action": action,
        "reason": f"{action} after a look",
        "expected_state": "open",
    }

    def post() -> str:
        try:
            if start is not None:
                start.wait(timeout=30)
            response = client.post(url, data)
            assert response.status_code == 302, response.status_code
            return client.get(response["Location"]).content.decode()
        finally:
            connections.close_all()  # this thread's connection

    return post


def _race(posters: list[Callable[[], str]], during: Callable[[], None] | None = None) -> list:
    with ThreadPoolExecutor(max_workers=len(posters)) as pool:
        futures = [pool.submit(p) for p in posters]
        if during is not None:
            during()
        return [f.result(timeout=60) for f in futures]


def _assert_one_winner(pages: list[str], before: int) -> None:
    decisions = list(Decision.objects.order_by("sequence")[before:])
    assert len(decisions) == 1, decisions
    winner = decisions[0]
    state = actions.STATE_AFTER[winner.action]
    told = [p for p in pages if f"already set {NODE} to {state}" in p]
    recorded = [p for p in pages if f"{winner.action} {NODE} recorded" in p]
    assert (len(told), len(recorded)) == (1, 1), [p[:200] for p in pages]


def test_two_commanders_racing_on_one_hypothesis_one_wins_the_other_is_told(
    investigation, commander, second_commander
):
    clients = (_client(commander), _client(second_commander))
    for _ in range(ROUNDS):
        before = Decision.objects.count()
        start = threading.Barrier(2)
        pages = _race(
            [
                _poster(clients[0], investigation, "confirm", start),
                _poster(clients[1], investigation, "eliminate", start),
            ]
        )
        _assert_one_winner(pages, before)
        actions.decide(
            investigation=investigation, node=NODE, action="reopen", reason="next round",
            user=commander, evidence={},
        )  # fmt: skip
    sequences = list(Decision.objects.order_by("sequence").values_list("sequence", flat=True))
    assert sequences == list(range(1, 2 * ROUNDS + 1))
    assert TimelineEvent.objects.filter(kind="decision").count() == 2 * ROUNDS


def test_both_posts_wait_on_the_investigations_lock_then_exactly_one_wins(
    investigation, commander, second_commander
):
    """Deterministic interleaving: both requests are provably inside ``decide`` at once,
    blocked on the row lock this test holds, before either may proceed."""
    if connection.vendor != "postgresql":
        require_service("PostgreSQL", "row-lock waits are observed through pg_stat_activity")

    def waiting_on_lock() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
            return cursor.fetchone()[0]

    posters = [
        _poster(_client(commander), investigation, "confirm", None),
        _poster(_client(second_commander), investigation, "eliminate", None),
    ]
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        try:
            with transaction.atomic():
                Investigation.objects.select_for_update().get(pk=investigation.pk)
                locked.set()
                release.wait(timeout=60)
        finally:
            connections.close_all()

    blocked: list[bool] = []

    def during() -> None:
        blocked.append(wait_until(lambda: waiting_on_lock() == 2, 30, 0.05))
        release.set()

    with ThreadPoolExecutor(max_workers=1) as locker:
        holder = locker.submit(hold_lock)
        assert locked.wait(timeout=30)
        try:
            pages = _race(posters, during)
        finally:
            release.set()
        holder.result(timeout=60)
    assert blocked == [True]
    _assert_one_winner(pages, 0)
