"""The test helpers themselves: a missing service skips cleanly, with nothing left open.

A file handle opened before a skip leaks until garbage collection, where warnings-as-errors
fails an unrelated test; these tests pin that the helpers open nothing they do not close.
"""

from __future__ import annotations

import gc
import sys
import warnings

import pytest

from tests.support import services
from tests.support.processes import spawn_logged


def _resource_warnings() -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_missing_redis_server_skips_before_any_log_is_opened(tmp_path, monkeypatch):
    monkeypatch.setattr(services.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    server = services.RedisServer(services.free_port(), tmp_path)
    with pytest.raises(pytest.skip.Exception, match="redis-server is not installed"):
        server.start()
    assert not (tmp_path / "redis.log").exists()
    assert server.process is None
    assert _resource_warnings() == []


def test_a_binary_that_fails_to_start_leaves_no_open_log(tmp_path):
    with pytest.raises(FileNotFoundError):
        spawn_logged([str(tmp_path / "no-such-binary")], tmp_path / "x.log")
    assert _resource_warnings() == []


def test_the_log_receives_the_childs_output_and_the_parent_holds_no_handle(tmp_path):
    log = tmp_path / "child.log"
    process = spawn_logged([sys.executable, "-c", "print('hello from the child')"], log)
    assert process.wait(timeout=60) == 0
    spawn_logged([sys.executable, "-c", "print('and again')"], log, append=True).wait(60)
    assert log.read_text().split() == ["hello", "from", "the", "child", "and", "again"]
    assert _resource_warnings() == []
