"""The deployment files stay valid as the project changes."""

from __future__ import annotations

import shutil
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.http import HttpRequest

from teams.models import Membership, Role
from tests.conftest import require_service

ROOT = Path(__file__).resolve().parents[2]


def test_docker_compose_accepts_the_compose_file(tmp_path):
    compose = shutil.which("docker-compose")
    if compose is None:
        require_service("docker-compose", "not installed (apt-get install docker-compose)")
    result = subprocess.run(
        [compose, "--project-directory", str(ROOT), "-f", "docker-compose.yml", "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    services = subprocess.run(
        [compose, "-f", "docker-compose.yml", "config", "--services"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    for name in ("postgres", "redis", "web", "worker", "artifact-worker", "beat", "simulator"):
        assert name in services


@pytest.mark.django_db
def test_bootstrap_demo_creates_a_commander_who_can_log_in(client):
    out = StringIO()
    call_command("bootstrap_demo", stdout=out)
    text = out.getvalue()
    password = text.split("with password ")[1].split()[0].strip("'")
    # django-axes' backend needs the request it throttles; the test client gives none.
    assert client.login(request=HttpRequest(), username="commander", password=password)
    assert Membership.objects.get(user__username="commander").role == Role.COMMANDER
    # Running it again resets the password instead of failing.
    call_command("bootstrap_demo", "--password", "another-long-password", stdout=StringIO())
    assert client.login(
        request=HttpRequest(), username="commander", password="another-long-password"
    )


@pytest.mark.django_db
def test_bootstrap_demo_registers_the_simulator_as_probe_targets():
    from probes.models import Target

    for _ in range(2):  # idempotent
        call_command("bootstrap_demo", "--sim-url", "http://127.0.0.1:8100/", stdout=StringIO())
    urls = set(Target.objects.values_list("url", flat=True))
    assert urls == {
        "http://127.0.0.1:8100/metrics",
        "http://127.0.0.1:8100/dcgm/metrics",
        "http://127.0.0.1:8100/logs",
        "http://127.0.0.1:8100/profiler/memory_snapshot?rank=0",
        "http://127.0.0.1:8100/profiler/trace?mode=last&steps=400",
        "http://127.0.0.1:8100/profiler/gc_log",
    }
