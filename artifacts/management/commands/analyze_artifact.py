"""``manage.py analyze_artifact PATH [--kind K] --json``: one file, in-process, no worker and
no database writes; a rejected file exits with status 2 and one line saying why."""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandParser

from artifacts import kinds
from artifacts.analysis import analyse_file
from artifacts.bounded import Limits
from artifacts.errors import ArtifactRejected
from artifacts.units import signal_text


class Command(BaseCommand):
    help = "Analyse a CUDA memory snapshot, a Chrome trace or a gc log and print the analysis."
    requires_system_checks: list = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")
        parser.add_argument("--kind", choices=kinds.KINDS, help="skip detection")
        parser.add_argument("--json", action="store_true", help="print the analysis as JSON")
        parser.add_argument("--max-mib", type=int, default=1024, help="size limit (MiB)")
        parser.add_argument("--timeout", type=float, default=600.0, help="time limit (s)")

    def handle(self, *args, path: str, kind: str | None, **options) -> None:
        limits = Limits(
            max_file_bytes=options["max_mib"] << 20,
            max_expanded_bytes=max(options["max_mib"] << 20, 1 << 30) * 8,
            deadline_s=options["timeout"],
        )
        try:
            analysis = analyse_file(path, kind, limits)
        except ArtifactRejected as exc:
            sys.stderr.write(f"rejected: {exc.reason}\n")
            sys.exit(2)
        if options["json"]:
            self.stdout.write(json.dumps(analysis, indent=1, sort_keys=True))
            return
        self.stdout.write(f"{analysis['kind']}: {path}")
        for finding in analysis.get("findings", []):
            self.stdout.write(f"  finding {finding.get('key')}: {finding.get('title')}")
        signals = sorted(analysis["signals"].items())
        width = max((len(name) for name, _ in signals), default=0)
        for name, value in signals:
            self.stdout.write(f"  {name:<{width}}  {signal_text(name, value)}")
