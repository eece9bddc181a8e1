"""The worker's collector policy: start-up heap frozen, young collections rarer, cycles
still collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from atlas_console import gc_policy


@pytest.fixture
def restore_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


class _Node:
    pass


def test_tuning_freezes_the_heap_and_still_collects_cycles(restore_gc):
    held = [{"start-up": i} for i in range(1000)]
    thresholds = gc_policy.tune_for_worker()
    assert thresholds[0] == gc_policy.YOUNG_THRESHOLD == gc.get_threshold()[0]
    assert gc.get_freeze_count() >= len(held)
    node = _Node()
    node.me = node  # a cycle made after tuning: only the collector can free it
    alive = weakref.ref(node)
    del node
    assert alive() is not None
    gc.collect()
    assert alive() is None
