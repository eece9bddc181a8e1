"""``manage.py seed_investigations --team NAME --count N``: realistic closed investigations
in bulk (see review.seeding), with their search documents."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from review import seeding

MAX_COUNT = 1_000_000


class Command(BaseCommand):
    help = "Bulk-create realistic closed investigations (with decisions, fixes, narratives)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--team", required=True, help="Team name (created if missing).")
        parser.add_argument("--count", type=int, required=True)
        parser.add_argument("--seed", type=int, default=0, help="Random seed (default 0).")
        parser.add_argument("--days", type=int, default=365, help="Spread over this many days.")

    def handle(self, *args, team: str, count: int, seed: int, days: int, **options) -> None:
        if not 1 <= count <= MAX_COUNT:
            raise CommandError(f"--count must be between 1 and {MAX_COUNT:,}")
        if not 1 <= days <= 3650:
            raise CommandError("--days must be between 1 and 3650")
        if not team.strip() or len(team) > 100:
            raise CommandError("--team must be a name of 1 to 100 characters")
        started = time.perf_counter()
        result = seeding.seed(team_name=team.strip(), count=count, seed=seed, days=days)
        self.stdout.write(
            f"Seeded {result.investigations} investigations ({result.drills} drills, "
            f"{result.decisions} decisions, {result.fixes} fixes, {result.postmortems} "
            f"postmortems, {result.documents} search documents) for {result.team.name} "
            f"in {time.perf_counter() - started:.1f} s"
        )
