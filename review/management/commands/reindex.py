"""``manage.py reindex [--team NAME]``: rebuild the review search documents from the record
(after a restore, an upgrade, or an indexing failure the log reported)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from investigations.models import Investigation
from review import indexing
from teams.models import Team


class Command(BaseCommand):
    help = "Rebuild the search documents of every investigation (or one team's)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--team", help="Only this team's investigations.")

    def handle(self, *args, team: str | None = None, **options) -> None:
        started = time.perf_counter()
        investigations = Investigation.objects.all()
        if team:
            try:
                investigations = investigations.filter(team=Team.objects.get(name=team))
            except Team.DoesNotExist:
                raise CommandError(f"no team named {team!r}") from None
        written = indexing.rebuild_all(investigations)
        self.stdout.write(
            f"Rebuilt {written} search documents in {time.perf_counter() - started:.1f} s"
            f" ({'full-text' if indexing.uses_full_text() else 'plain-text'} search)"
        )
