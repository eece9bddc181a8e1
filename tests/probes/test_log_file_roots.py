"""log_file targets cannot leave ATLAS_LOG_FILE_ROOTS, block on a FIFO, or raise raw OSErrors
(issue 19.9).

Run against the real file system: a thread swaps symbolic links while reads run, the
way an attacker with write access inside a root would.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deployments.models import Deployment
from probes.logfile import read_chunk, resolve_inside
from probes.models import Target, TargetKind
from probes.net import ProbeError
from probes.tasks import poll_host_target

SECRET = b"SECRET outside the roots\n"
INSIDE = b"INFO inside the root\n"


def _swapping(link: Path, outside: str, stop) -> None:
    """Turn ``link`` from a real entry inside the root into a symlink to ``outside`` and back,
    until told to stop. ``resolve()`` returns the path with no symlink in it, so the swap
    that escapes is a real file or directory replaced by a link after the check."""
    spare = link.with_name(link.name + ".swap")
    stash = link.with_name(link.name + ".real")
    is_dir = link.is_dir()
    while not stop.is_set():
        if is_dir:
            link.rename(stash)
            link.symlink_to(outside)
            link.unlink()
            stash.rename(link)
        else:
            spare.write_bytes(INSIDE)
            spare.replace(link)
            spare.symlink_to(outside)
            spare.replace(link)


def _race(read, link, outside, seconds: float = 3.0) -> tuple[int, int, list[BaseException]]:
    # A process, not a thread: a thread swaps only when the GIL lets it, which is rarely
    # between two lines of the reader; another process races it for real.
    stop = multiprocessing.get_context("fork").Event()
    swapper = multiprocessing.get_context("fork").Process(
        target=_swapping, args=(link, outside, stop), daemon=True
    )
    swapper.start()
    inside = escaped = 0
    raw: list[BaseException] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                data = read()
            except ProbeError:
                continue
            except Exception as exc:  # counting what leaked, not handling it
                raw.append(exc)
                continue
            escaped += SECRET in data
            inside += INSIDE in data
    finally:
        stop.set()
        swapper.join(5)
        if swapper.is_alive():
            swapper.kill()
    return inside, escaped, raw


@pytest.fixture
def layout(tmp_path):
    root, outside = tmp_path / "logs", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "inside.log").write_bytes(INSIDE)
    (outside / "secret.log").write_bytes(SECRET)
    (root / "real").mkdir()
    (root / "real" / "engine.log").write_bytes(INSIDE)
    (outside / "engine.log").write_bytes(SECRET)
    return root, outside


def test_a_file_swapped_for_a_symlink_during_reads_never_escapes(layout):
    root, outside = layout
    link = root / "current.log"
    link.write_bytes(INSIDE)
    inside, escaped, raw = _race(
        lambda: read_chunk(str(link), 0, 4096, [root]).data, link, str(outside / "secret.log")
    )
    assert (escaped, raw) == (0, [])
    assert inside > 0  # the in-root link was followed: the refusal is not blanket


def test_a_directory_swapped_for_a_symlink_during_reads_never_escapes(layout):
    root, outside = layout
    link = root / "real"
    inside, escaped, raw = _race(
        lambda: read_chunk(str(link / "engine.log"), 0, 4096, [root]).data, link, str(outside)
    )
    assert (escaped, raw) == (0, [])
    assert inside > 0


def _unblock(fifo) -> None:
    """Open the FIFO's write end and close it: a reader blocked in open() then reads EOF."""
    with contextlib.suppress(OSError):  # nobody is blocked on it
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_fifo_inside_a_root_is_refused_without_blocking(layout):
    root, _ = layout
    fifo = root / "engine.log"
    os.mkfifo(fifo)
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.append(read_chunk(str(fifo), 0, 4096, [root]))
        except ProbeError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(5)
    blocked = reader.is_alive()
    _unblock(fifo)
    reader.join(5)
    assert not blocked, "reading a FIFO blocked"
    (error,) = outcome
    assert isinstance(error, ProbeError) and error.kind == "bad-path", error
    assert "not a regular file" in str(error)


def _loop(root: Path) -> None:
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")


def _unreadable(root: Path) -> None:
    (root / "locked.log").write_bytes(b"x")
    (root / "locked.log").chmod(0)


ODD_PATHS = {
    "symlink-loop": (_loop, "a", "bad-path"),
    "file-as-directory": (None, "inside.log/more", "bad-path"),
    "directory": (None, "real", "bad-path"),
    "dotdot": (None, "real/../../outside/secret.log", "bad-path"),
    "relative-escape": (
        lambda r: (r / "up").symlink_to("../outside/secret.log"),
        "up",
        "bad-path",
    ),
    "unreadable": (_unreadable, "locked.log", "permission"),
    "missing": (None, "missing.log", "not-found"),
}


@pytest.mark.parametrize(("make", "path", "kind"), ODD_PATHS.values(), ids=ODD_PATHS.keys())
def test_odd_paths_are_clear_errors_not_raw_oserrors(layout, make, path, kind):
    root, _ = layout
    if make is not None:
        make(root)
    if kind == "permission" and os.geteuid() == 0:
        pytest.skip("root reads any file")
    with pytest.raises(ProbeError) as caught:
        read_chunk(str(root / path), 0, 4096, [root])
    assert caught.value.kind == kind, caught.value


def test_symlinks_that_stay_inside_the_roots_are_followed(layout):
    root, _ = layout
    (root / "absolute.log").symlink_to(root / "real" / "engine.log")
    (root / "relative.log").symlink_to("real/../inside.log")
    assert read_chunk(str(root / "absolute.log"), 0, 4096, [root]).data == INSIDE
    assert read_chunk(str(root / "relative.log"), 0, 4096, [root]).data == INSIDE
    assert resolve_inside(str(root / "relative.log"), [root]) == root.resolve() / "inside.log"


@pytest.mark.django_db
def test_a_fifo_target_fails_its_poll_instead_of_hanging_the_worker(team, layout, settings):
    root, _ = layout
    settings.ATLAS_LOG_FILE_ROOTS = [root]
    fifo = root / "engine.log"
    os.mkfifo(fifo)
    deployment = Deployment.objects.create(team=team, name="atlas-gpu-host")
    target = Target.objects.create(
        deployment=deployment, kind=TargetKind.LOG_FILE, path=str(fifo), host_queue="gpu-host-1"
    )
    watchdog = threading.Timer(10, _unblock, args=(fifo,))  # so today's main fails, not hangs
    watchdog.start()
    try:
        poll_host_target.apply(
            args=[str(target.pk), datetime(2026, 11, 30, tzinfo=UTC).isoformat()]
        )
    finally:
        watchdog.cancel()
    target.refresh_from_db()
    assert target.last_error_kind == "bad-path", target.last_error
    assert "not a regular file" in target.last_error
