"""Batch fetching: every target gets an answer or a bounded error, in request order."""

from __future__ import annotations

from probes.collect import fetch_all
from probes.net import FetchPolicy
from tests.support.hostile import hostile_server

POLICY = FetchPolicy(connect_timeout=1, read_timeout=1, total_timeout=2, max_bytes=1 << 20)


def test_a_batch_mixes_answers_and_bounded_errors_in_order():
    with hostile_server() as base:
        paths = ["/ok", "/hang", "/huge", "/ok", "/redirect-metadata", "/missing"]
        fetched = fetch_all([(str(i), base + p) for i, p in enumerate(paths)], POLICY)
    assert [f.key for f in fetched] == [str(i) for i in range(len(paths))]
    kinds = [f.error.kind if f.error else "ok" for f in fetched]
    assert kinds == ["ok", "timeout", "too-large", "ok", "redirect", "http-status"]


def test_an_empty_batch_is_empty():
    assert fetch_all([], POLICY) == []
