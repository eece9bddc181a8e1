"""Probes that run on the GPU host's own worker (NVML, log files), and SGLang server info."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from deployments.models import Deployment
from enginesim.deployment import Deployment as SimDeployment
from enginesim.deployment import SimClock
from enginesim.server import SimServer
from probes.logfile import read_chunk, resolve_inside
from probes.models import Observation, Poll, Target, TargetKind
from probes.net import ProbeError
from probes.tasks import enqueue_due, poll_deployment, poll_host_target

CYCLE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
LINE = (
    "(EngineCore_DP0 pid=241) INFO 11-30 11:59:0{n} [gpu_model_runner.py:3480] "
    "Graph capturing finished in 8 secs, took 0.31 GiB\n"
)


def test_log_paths_must_resolve_inside_a_root(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    (root / "engine.log").write_text("x")
    (root / "escape").symlink_to("/etc/passwd")
    assert resolve_inside(str(root / "engine.log"), [root]) == (root / "engine.log").resolve()
    for bad in (str(root / "escape"), str(root / ".." / "x"), "relative.log", "/etc/passwd"):
        with pytest.raises(ProbeError) as caught:
            resolve_inside(bad, [root])
        assert caught.value.kind == "bad-path"
    with pytest.raises(ProbeError):
        resolve_inside(str(root / "engine.log"), [])  # no roots: nothing is readable


def test_log_reads_are_bounded_resume_and_notice_rotation(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(b"a" * 100)
    first = read_chunk(str(log), 0, 64, [tmp_path])
    assert (len(first.data), first.next_offset, first.rotated) == (64, 64, False)
    second = read_chunk(str(log), first.next_offset, 64, [tmp_path])
    assert (len(second.data), second.next_offset) == (36, 100)
    log.write_bytes(b"b" * 10)  # rotated: shorter than where we were
    third = read_chunk(str(log), second.next_offset, 64, [tmp_path])
    assert third.rotated and third.data == b"b" * 10
    with pytest.raises(ProbeError) as caught:
        read_chunk(str(tmp_path / "missing.log"), 0, 64, [tmp_path])
    assert caught.value.transient


@pytest.mark.django_db
def test_a_log_file_target_is_followed_across_cycles(deployment, tmp_path, settings):
    settings.ATLAS_LOG_FILE_ROOTS = [tmp_path]
    log = tmp_path / "engine.log"
    log.write_text(LINE.format(n=1) + LINE.format(n=2)[:40])  # second line still being written
    target = Target.objects.create(
        deployment=deployment, kind=TargetKind.LOG_FILE, path=str(log), host_queue="gpu-host-1"
    )
    poll_host_target.apply(args=[str(target.pk), CYCLE.isoformat()])
    with log.open("a") as handle:
        handle.write(LINE.format(n=2)[40:])
    later = CYCLE + timedelta(seconds=5)
    poll_host_target.apply(args=[str(target.pk), later.isoformat()])
    poll_host_target.apply(args=[str(target.pk), later.isoformat()])  # a redelivery
    counts = list(
        Observation.objects.filter(target=target, signal="log_events", value__gt=0).values_list(
            "taken_at", "value"
        )
    )
    assert sorted(counts) == [(CYCLE, 1.0), (later, 1.0)]
    # Incident kinds are counted even at zero: a read log without an OOM is evidence of none.
    assert (
        Observation.objects.get(
            target=target, signal="log_events", labels="kind=cuda_oom", taken_at=later
        ).value
        == 0.0
    )
    target.refresh_from_db()
    assert target.log_offset == log.stat().st_size
    assert Poll.objects.filter(target=target).count() == 2


@pytest.mark.django_db
def test_no_nvml_library_is_a_state_not_an_error(deployment):
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has a GPU driver")
    target = Target.objects.create(
        deployment=deployment, kind=TargetKind.NVML, host_queue="gpu-host-1"
    )
    for n in range(3):
        poll_host_target.apply(
            args=[str(target.pk), (CYCLE + timedelta(seconds=5 * n)).isoformat()]
        )
    target.refresh_from_db()
    poll = Poll.objects.filter(target=target).first()
    assert poll.ok and poll.snapshot["state"] == "no-gpu"
    assert target.consecutive_failures == 0 and target.last_error == ""
    assert Observation.objects.get(target=target, taken_at=CYCLE, signal="nvml_devices").value == 0


@pytest.mark.django_db
def test_host_targets_are_routed_to_their_hosts_queue(deployment, monkeypatch):
    sent = []
    monkeypatch.setattr(
        poll_host_target, "apply_async", lambda args, **kw: sent.append((args, kw["queue"]))
    )
    Deployment.objects.filter(pk=deployment.pk).update(polling_active=True)
    target = Target.objects.create(
        deployment=deployment, kind=TargetKind.NVML, host_queue="gpu-host-7"
    )
    assert enqueue_due(timezone.now(), http_poll=poll_deployment) == 1
    assert sent[0][0][0] == str(target.pk) and sent[0][1] == "gpu-host-7"


@pytest.mark.django_db(transaction=True)
def test_sglang_server_info_is_observed_over_http(deployment):
    sim = SimDeployment("healthy", fmt="sglang", seed=0, clock=SimClock("manual"))
    server = SimServer(sim).start_in_thread()
    try:
        base = f"http://127.0.0.1:{server.ports['main']}"
        target = Target.objects.create(
            deployment=deployment, kind=TargetKind.SGLANG_INFO, url=base + "/get_server_info"
        )
        poll_deployment.apply(args=[str(deployment.pk), CYCLE.isoformat()])
    finally:
        server.stop()
    poll = Poll.objects.get(target=target)
    assert poll.ok, poll.error
    assert "tp_size" in poll.snapshot["args"]
    assert Observation.objects.filter(target=target, signal="sglang_kvcache_gb").exists()


def test_roots_setting_must_be_absolute(tmp_path):
    from tests.foundation.test_env import _manage

    result = _manage(["check"], {"ATLAS_LOG_FILE_ROOTS": "var/log"}, tmp_path)
    assert result.returncode != 0 and "must be absolute" in result.stderr
