"""The cyclic garbage collector's settings for a long-running worker process.

Why: a poll cycle builds hundreds of thousands of small containers (a parsed scrape is
~1,000 tuples per engine, its observations ~130 more) that reference counting frees on
its own; almost none form cycles. CPython's default collector still starts a young
collection every 700 net allocations and, in time, older ones that walk every container
the process holds: Django's and Celery's import-time heap, the worker's window of recent
rows, the cycle's outcomes so far. In ``bench/probes_fanout.py`` (1,000 engines on
PostgreSQL, the window full; one process alternating the policy cycle by cycle, timed by
``gc.callbacks``) that was 1,141 collections and 0.87 of 4.46 CPU-s per cycle.

The policy (7 collections, 0.11 CPU-s, cycles of 3.54 CPU-s; ``bench/README.md``): after
start-up the heap built by imports and configuration is frozen (``gc.freeze``: moved to
a generation that is never walked; on a prefork pool this also keeps the parent's pages
shared), and a young collection waits for ``YOUNG_THRESHOLD`` net allocations. Cycles are still
collected, just in larger, rarer batches; the older generations keep their defaults.
"""

from __future__ import annotations

import gc

# Net container allocations between young collections (CPython's default is 700).
YOUNG_THRESHOLD = 50_000


def tune_for_worker(young: int = YOUNG_THRESHOLD) -> tuple[int, int, int]:
    """Freeze what the process holds now and raise the young threshold; returns the
    thresholds in force. Call once the process has imported and configured what it
    serves with (a Celery worker child after its init, a bench after its set-up)."""
    gc.collect()  # what start-up left as garbage is not frozen with the rest
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
    return gc.get_threshold()
