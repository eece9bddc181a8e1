"""How long does the investigation page take with a 50-hypothesis playbook over 50,000
stored observations? Against a named baseline measured in the same run:

    baseline "empty": the same page, the same machinery (session, access, playbook
    evaluation, budget panel, probe strip, evidence cards), for a one-hypothesis playbook
    with no observations at all.

Each view is requested through Django's test client on a throwaway SQLite database (the
real middleware, templates and queries; no network). The full page, the tree partial
htmx refreshes every 5 s, and the evidence cards (refreshed every 30 s when the record
changed) are timed separately; the first page view also replays the record for the
regression gate, which is then cached for the poll cycle, so "cold" and "warm" are both
printed. Ratios carry across machines; nothing asserts absolute times.

    .venv/bin/python bench/investigation_page.py
    .venv/bin/python bench/investigation_page.py --observations 200000 --hypotheses 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _setup_django(data_dir: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")
    os.environ["ATLAS_DATA_DIR"] = data_dir
    if os.environ.get("DATABASE_URL"):
        raise SystemExit("set no DATABASE_URL: the bench creates its own SQLite database")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _time(client, url: str, repeat: int) -> float:
    """Median seconds per request."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - began)
        assert response.status_code in (200, 204), (url, response.status_code)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--observations", type=int, default=50_000)
    parser.add_argument("--hypotheses", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as data_dir:
        _setup_django(data_dir)
        from django.core.cache import cache
        from django.test import Client
        from django.test.utils import setup_test_environment
        from django.urls import reverse

        from teams.models import Membership, Role, Team
        from tests.investigations.test_page_scale import build_record, register

        setup_test_environment()  # the test client's ALLOWED_HOSTS ("testserver")
        register(args.hypotheses, key="bench-big")
        register(1, key="bench-empty")
        team = Team.objects.create(name="bench")
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user("bench")
        Membership.objects.create(team=team, user=user, role=Role.COMMANDER)
        began = time.perf_counter()
        big = build_record(team, user, observations=args.observations, symptom="bench-big")
        print(f"setup: {args.observations:,} observations in {time.perf_counter() - began:.1f} s")
        empty = build_record(team, user, observations=0, symptom="bench-empty", name="empty")
        client = Client()
        client.force_login(user)

        # The process's first requests pay one-off costs (URL resolver, template loading
        # and compiling): paid here by both pages, so neither side's "cold" figure carries
        # them (the empty page, timed first, used to, and read 0.3x).
        for investigation in (empty, big):
            for name in ("investigations:detail", "investigations:tree", "investigations:evidence"):
                client.get(reverse(name, args=[investigation.pk]))
        cache.clear()
        print(f"{'view':<28} {'empty ms':>9} {'big ms':>9} {'ratio':>6}")
        rows = []
        for label, name in (
            ("page, cold (gate replay)", "investigations:detail"),
            ("page, warm", "investigations:detail"),
            ("tree partial (every 5 s)", "investigations:tree"),
            ("evidence cards", "investigations:evidence"),
        ):
            measured = []
            for investigation in (empty, big):
                url = reverse(name, args=[investigation.pk])
                if label.endswith("(gate replay)"):
                    cache.clear()
                    measured.append(_time(client, url, 1))
                elif name == "investigations:evidence":
                    times = []
                    for _ in range(args.repeat):
                        cache.clear()  # cards are cached per record version: time a build
                        times.append(_time(client, url, 1))
                    measured.append(statistics.median(times))
                else:
                    measured.append(_time(client, url, args.repeat))
            base, ours = measured
            rows.append((label, base, ours))
            print(f"{label:<28} {base * 1e3:>9.1f} {ours * 1e3:>9.1f} {ours / base:>6.1f}")
        print(
            f"{args.hypotheses} hypotheses, {args.observations:,} observations vs the empty page "
            f"(1 hypothesis, no observations): warm page {rows[1][2] / rows[1][1]:.1f}x"
        )


if __name__ == "__main__":
    main()
