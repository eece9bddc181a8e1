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


def test_an_endless_chunk_drip_costs_one_deadline_and_spares_the_good_targets():
    """Issue 19.1: a peer streaming 1-byte chunks as fast as it can held ``fetch_all`` for
    196 s past a 2 s deadline and starved the batch; now it is one bounded timeout."""
    policy = FetchPolicy(connect_timeout=1, read_timeout=1, total_timeout=2, max_bytes=8 << 20)
    with hostile_server() as base:
        paths = ["/ok", "/drip-chunked", "/metrics", "/ok"]
        fetched = fetch_all([(str(i), base + p) for i, p in enumerate(paths)], policy)
    # The drip never ends and never idles, so only the total deadline can give "timeout":
    # without it the read ran on until the 8 MiB cap ("too-large"), or for ever.
    kinds = [f.error.kind if f.error else "ok" for f in fetched]
    assert kinds == ["ok", "timeout", "ok", "ok"]


def test_an_empty_batch_is_empty():
    assert fetch_all([], POLICY) == []
