"""python manage.py diagnose --symptom high-ttft --engine URL ... --json

Runs the probes and the playbook in-process for N cycles and prints the ranked tree;
no worker, no database rows. Exit status 0 when it ran (whatever it found), 2 on
bad arguments.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError

from artifacts.errors import ArtifactRejected
from artifacts.fetch import fetch_and_analyse
from deployments.budget import Budget
from investigations.diagnose import Diagnosis, evaluation_json, ranking_lines, run
from investigations.playbook import PlaybookError, get_playbook, playbooks
from probes import kinds
from probes.net import ProbeError, validate_url
from probes.policy import fetch_policy

MAX_DEPLOYMENT_FILE = 64 * 1024


def _dest(option: str) -> str:
    """argparse's attribute for ``--option`` (``log-file`` -> ``log_file``)."""
    return option.replace("-", "_")


class Command(BaseCommand):
    help = "Diagnose a symptom against live endpoints without a worker."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--symptom", required=True, help=", ".join(sorted(playbooks())))
        for option in kinds.options():  # one per probe kind diagnose can read
            here = kinds.by_option(option).fetch is kinds.Fetch.HOST
            parser.add_argument(
                f"--{option}",
                action="append",
                default=[],
                dest=_dest(option),
                metavar="PATH" if here else "URL",
            )
        parser.add_argument(
            "--artifact",
            action="append",
            default=[],
            metavar="PATH_OR_URL",
            help="a memory snapshot, Chrome trace or gc log (file, or a profiler endpoint URL)",
        )
        parser.add_argument("--deployment", type=Path, help="YAML/JSON file of budget constants")
        parser.add_argument("--interval", type=float, default=5.0)
        parser.add_argument("--cycles", type=int, default=3)
        parser.add_argument("--window", type=float, default=60.0, help="seconds for rates")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args, **options) -> None:
        try:
            playbook = get_playbook(options["symptom"])
        except PlaybookError as exc:
            raise CommandError(str(exc)) from None
        endpoints = [
            (option, where) for option in kinds.options() for where in options[_dest(option)]
        ]
        if not endpoints and not options["artifact"]:
            named = ", ".join(f"--{option}" for option in kinds.options())
            raise CommandError(f"give at least one {named} URL or --artifact")
        for option, where in endpoints:
            if kinds.by_option(option).fetch is kinds.Fetch.HOST:
                if not Path(where).is_file():
                    raise CommandError(f"{where}: not a readable file")
                continue
            try:
                validate_url(where)
            except ProbeError as exc:
                raise CommandError(f"{where}: {exc.message}") from None
        if not 0.1 <= options["interval"] <= 3600:
            raise CommandError("--interval must be between 0.1 and 3600 seconds")
        budget = self._budget(options["deployment"])
        diagnosis = Diagnosis(
            playbook, budget, endpoints, fetch_policy(), window_s=options["window"]
        )
        for n, source in enumerate(options["artifact"]):
            try:
                diagnosis.add_artifact(str(n), fetch_and_analyse(source))
            except ArtifactRejected as exc:
                diagnosis.artifact_errors[source] = exc.reason
        try:
            result = run(diagnosis, cycles=options["cycles"], interval_s=options["interval"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        report = evaluation_json(result, diagnosis)
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, default=str))
            return
        self.stdout.write(f"{playbook.title}: alarm {report['alarm']}")
        self.stdout.write("causes, most likely first:")
        for line in ranking_lines(result):
            self.stdout.write(line)
        self.stdout.write(f"root cause: {report['root_cause']}  fix: {report['fix']}")
        for url, lines in report["log_unrecognised_errors"].items():
            self.stdout.write(f"unrecognised error lines in {url} (zero counts held inconclusive):")
            for line in lines:
                self.stdout.write(f"  {line}")

    def _budget(self, path: Path | None) -> Budget:
        if path is None:
            return Budget()
        try:
            if path.stat().st_size > MAX_DEPLOYMENT_FILE:
                raise CommandError(f"{path}: larger than {MAX_DEPLOYMENT_FILE} bytes")
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: {exc}") from None
        if not isinstance(data, dict):
            raise CommandError(f"{path}: expected a mapping of budget constants")
        unknown = set(data) - set(Budget.__dataclass_fields__)
        if unknown:
            raise CommandError(f"{path}: unknown constants {', '.join(sorted(unknown))}")
        try:
            return Budget(**data)
        except (TypeError, ValueError) as exc:
            raise CommandError(f"{path}: {exc}") from None
