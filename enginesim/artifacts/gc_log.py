"""CPython ``gc.set_debug(gc.DEBUG_STATS)`` stderr output for simulated GC pauses.

DEBUG_STATS lines carry no timestamp, so an operator (and Atlas) can only place a pause by
the timestamped engine log lines around it. ``interleave_with`` lets the simulator weave
its vLLM lines in, in time order, so the output has that real-world shape.

Shapes by version (CPython ``gcmodule.c`` / ``Python/gc.c``):

* 3.8-3.13: ``gc: collecting generation N...``, ``gc: objects in each generation: a b c``,
  ``gc: objects in permanent generation: p``, then
  ``gc: done, U unreachable, V uncollectable, 0.0123s elapsed``.
* 3.14+ (incremental collector, generations young/old/old): ``_PyGC_Collect`` prints only
  the two header lines, so there is no ``done``/``elapsed`` line and the pause length is
  only visible from surrounding timestamps.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .records import DEFAULT_EPOCH_UNIX, GcPause

_YOUNG_THRESHOLD = 2000  # gen-0 threshold in 3.13+ (700 before)


def _parse_version(python_version: str) -> tuple[int, int]:
    try:
        major, minor = (int(p) for p in python_version.split(".")[:2])
    except ValueError:
        raise ValueError(f"python_version must look like '3.11', got {python_version!r}") from None
    if (major, minor) < (3, 8):
        raise ValueError("DEBUG_STATS output before 3.8 is not generated")
    return major, minor


def gc_pause_lines(
    pause: GcPause,
    *,
    python_version: str = "3.11",
    seed: int | None = None,
    permanent_objects: int = 0,
) -> list[str]:
    """The stderr lines one collection prints (object counts are plausible, seeded)."""
    version = _parse_version(python_version)
    if not 0 <= pause.generation <= 2:
        raise ValueError(f"generation must be 0, 1 or 2, got {pause.generation}")
    rng = random.Random(seed if seed is not None else round(pause.time_s * 1e6))
    young_max = _YOUNG_THRESHOLD if version >= (3, 13) else 700
    # A long-lived engine keeps ~10^6 objects in the oldest generation.
    counts = [rng.randint(young_max // 2, young_max), rng.randint(50, 9000)]
    counts.append(rng.randint(900_000, 1_600_000))
    lines = [
        f"gc: collecting generation {pause.generation}...",
        "gc: objects in each generation: " + " ".join(str(c) for c in counts),
        f"gc: objects in permanent generation: {permanent_objects}",
    ]
    if version < (3, 14):
        unreachable = pause.collected + pause.uncollectable
        lines.append(
            f"gc: done, {unreachable} unreachable, {pause.uncollectable} uncollectable, "
            f"{pause.duration_s:.4f}s elapsed"
        )
    return lines


def render_gc_log(
    pauses: Sequence[GcPause],
    *,
    python_version: str = "3.11",
    epoch_unix: float = DEFAULT_EPOCH_UNIX,
    interleave_with: Sequence[tuple[float, str]] = (),
    prefix: str = "",
    permanent_objects: int = 0,
) -> str:
    """Stderr text: each pause's DEBUG_STATS block merged, in time order, with other lines.

    ``interleave_with`` holds ``(time_s, already formatted line)`` pairs, e.g. vLLM stats
    lines. A GC block prints at its ``time_s``; lines stamped inside a pause come after its
    block because the GIL holder cannot log mid-collection. ``prefix`` mimics vLLM's
    ``(EngineCore_DP0 pid=N) `` decoration of subprocess stderr; ``permanent_objects`` is
    what ``gc.freeze()`` moved out of collection (vLLM freezes after start-up).
    ``epoch_unix`` is accepted for interface symmetry: DEBUG_STATS lines carry no time.
    """
    del epoch_unix  # the lines have no timestamps; ordering alone is what matters
    items: list[tuple[float, int, int, list[str]]] = []
    for order, pause in enumerate(pauses):
        lines = gc_pause_lines(
            pause, python_version=python_version, permanent_objects=permanent_objects
        )
        block = [prefix + line for line in lines]
        items.append((pause.time_s, 0, order, block))
    for order, (t, line) in enumerate(interleave_with):
        items.append((t, 1, order, [line]))
    # A line stamped while a collection ran was written after it: GC blocks win ties and
    # any later timestamp sorts behind the block.
    items.sort(key=lambda item: (item[0], item[1], item[2]))
    out: list[str] = []
    for _t, _kind, _order, lines in items:
        out.extend(lines)
    return "\n".join(out) + ("\n" if out else "")
