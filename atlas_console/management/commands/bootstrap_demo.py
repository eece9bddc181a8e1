"""Create (or reset) the demo team and its commander for the one-command demo."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from deployments.models import ControllerKind, Deployment, EngineController
from drills.models import DrillRange
from probes.models import Target, TargetKind
from teams.models import Membership, Role, Team

DEMO_TEAM = "Atlas on-call"
DEMO_USER = "commander"
DRILL_DEPLOYMENT = "drill-range"


class Command(BaseCommand):
    help = "Create the demo team and a commander user, printing the password."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default=DEMO_USER)
        parser.add_argument(
            "--sim-url",
            default=None,
            help="Base URL of a running enginesim; registers it as the demo deployment's targets.",
        )
        parser.add_argument(
            "--drill-sim-url",
            default=None,
            help="Base URL of a second enginesim; registers it as the team's drill range.",
        )
        parser.add_argument(
            "--password",
            default=None,
            help="Use this password instead of a fresh random one (printed either way).",
        )

    @transaction.atomic
    def handle(
        self,
        *args,
        username: str,
        password: str | None,
        sim_url: str | None,
        drill_sim_url: str | None = None,
        **options,
    ) -> None:
        password = password or secrets.token_urlsafe(12)
        user, created = get_user_model().objects.get_or_create(username=username)
        user.set_password(password)
        user.is_staff = True
        user.is_superuser = True
        user.save()
        team, _ = Team.objects.get_or_create(name=DEMO_TEAM)
        Membership.objects.update_or_create(team=team, user=user, defaults={"role": Role.COMMANDER})
        if sim_url:
            deployment = register_simulated_deployment(team, sim_url.rstrip("/"))
            self.stdout.write(f"Deployment {deployment.name!r} probes {sim_url}.")
        if drill_sim_url:
            drill_range = register_drill_range(team, drill_sim_url.rstrip("/"))
            self.stdout.write(
                f"Drill range {drill_range.deployment.name!r} runs on {drill_sim_url}."
            )
        verb = "Created" if created else "Reset"
        self.stdout.write(f"{verb} demo user {username!r} with password {password!r}")
        self.stdout.write(f"Team {team.name!r} ({team.id}); {username} is its commander.")


def register_simulated_deployment(
    team: Team, base: str, name: str = "atlas-sim", *, shows_clock: bool = True
) -> Deployment:
    """The simulator's endpoints as probe targets, with the Atlas budget constants, and the
    simulator as the deployment's engine controller: Atlas runs it, so "Apply fix" applies
    the fix there (POST /control/fix with the console's control token). The demo shows the
    simulator's incident clock; a drill range never does (its timing is ground truth)."""
    deployment, _ = Deployment.objects.get_or_create(
        team=team, name=name, defaults={"model_name": "atlas-70b"}
    )
    EngineController.objects.update_or_create(
        deployment=deployment,
        defaults={"kind": ControllerKind.ENGINESIM, "url": base, "shows_clock": shows_clock},
    )
    wanted = [
        (TargetKind.ENGINE, f"{base}/metrics"),
        (TargetKind.DCGM, f"{base}/dcgm/metrics"),
        (TargetKind.LOG_HTTP, f"{base}/logs"),
        # Collected on request from an investigation ("Collect from profiler endpoints").
        (TargetKind.PROFILER, f"{base}/profiler/memory_snapshot?rank=0"),
        (TargetKind.PROFILER, f"{base}/profiler/trace?mode=last&steps=400"),
        (TargetKind.PROFILER, f"{base}/profiler/gc_log"),
    ]
    for kind, url in wanted:
        Target.objects.get_or_create(
            deployment=deployment, kind=kind, url=url, defaults={"replica": "0"}
        )
    return deployment


def register_drill_range(team: Team, base: str) -> DrillRange:
    """A practice deployment on its own simulator, which drills redeploy at will."""
    deployment = register_simulated_deployment(team, base, name=DRILL_DEPLOYMENT, shows_clock=False)
    drill_range, _ = DrillRange.objects.update_or_create(
        deployment=deployment, defaults={"team": team, "simulator_url": base}
    )
    return drill_range
