"""An engine snapshot's windowed inputs as one compact row, and the rows of recent
cycles kept by a worker process between cycles.

Windowed statistics (``probes.observe.engine_observations``) need each target's
snapshots of the last 60 s. Reading them back from the database every cycle, as JSON,
cost more than parsing the scrape (12 snapshots decoded per engine per cycle, ~4 KB
each, and the server rendering them). A row holds what the statistics read, the
counters, bucket counts, counts and sums, as one ``array('d')`` under a *layout* (the
keys and bucket bounds, interned: the same object for every scrape of the same shape),
so 2,000 engines x 13 cycles stay a few tens of megabytes and a series across cycles is
a column.

The database stays the truth: each cycle reads which (target, cycle) polls exist in the
window (keys only, no JSON), uses kept rows for those, and loads the snapshots only of
what is not kept (another process polled it, this one just started). A row is kept
only after its poll was stored.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping

_INTERNED: dict[tuple, Layout] = {}
_INTERNED_MAX = 10_000


class Layout:
    """The shape of a snapshot's windowed inputs: counter keys, then each histogram's
    key, bucket bounds as stored, and whether it has both a count and a sum.

    ``columnar``: every histogram has a count and a sum and distinct bounds, so a series
    across rows of this layout is one column (the fast path of the statistics)."""

    __slots__ = ("columnar", "counters", "floats", "histograms", "width")

    def __init__(
        self, counters: tuple[str, ...], histograms: tuple[tuple[str, tuple[str, ...], bool], ...]
    ) -> None:
        self.counters = counters
        self.histograms = histograms
        self.floats = tuple(tuple(float(le) for le in bounds) for _, bounds, _ in histograms)
        self.columnar = all(has for _, _, has in histograms) and all(
            len(set(les)) == len(les) for les in self.floats
        )
        self.width = len(counters) + sum(len(b) + 2 for _, b, _ in histograms)


def _layout(counters: tuple[str, ...], histograms: tuple) -> Layout:
    key = (counters, histograms)
    found = _INTERNED.get(key)
    if found is None:
        if len(_INTERNED) >= _INTERNED_MAX:
            _INTERNED.clear()
        found = _INTERNED[key] = Layout(counters, histograms)
    return found


class Row:
    """One snapshot's windowed inputs (see the module docstring)."""

    __slots__ = ("layout", "values")

    def __init__(self, layout: Layout, values: array) -> None:
        self.layout = layout
        self.values = values


def to_row(snapshot: Mapping) -> Row:
    """The row of an engine snapshot (``probes.observe.engine_snapshot``'s shape)."""
    counters = snapshot.get("counters") or {}
    values = array("d", counters.values())
    shapes = []
    for key, h in (snapshot.get("histograms") or {}).items():
        buckets = h["buckets"]
        count, total = h.get("count"), h.get("sum")
        has = count is not None and total is not None
        shapes.append((key, tuple(le for le, _ in buckets), has))
        values.extend(c for _, c in buckets)
        values.append(count if has else math.nan)
        values.append(total if has else math.nan)
    return Row(_layout(tuple(counters), tuple(shapes)), values)


def to_snapshot(row: Row) -> dict:
    """The counters and histograms of the snapshot a row came from (a histogram missing
    its count or its sum comes back without both: the statistics need both)."""
    layout, values = row.layout, row.values
    n = len(layout.counters)
    snapshot: dict = {"counters": dict(zip(layout.counters, values[:n], strict=True))}
    histograms = {}
    at = n
    for key, bounds, has in layout.histograms:
        end = at + len(bounds)
        histograms[key] = {
            "buckets": [[le, c] for le, c in zip(bounds, values[at:end], strict=True)],
            "count": values[end] if has else None,
            "sum": values[end + 1] if has else None,
        }
        at = end + 2
    snapshot["histograms"] = histograms
    return snapshot


class Recent:
    """Rows of recent good polls per target, kept by this process (see module doc)."""

    def __init__(self) -> None:
        self._rows: dict[object, dict[float, Row]] = {}

    def missing(self, wanted: Mapping[object, list[float]]) -> tuple[list, set[float]]:
        """The targets with a wanted cycle that is not kept, and those cycles' times.

        With several worker processes a deployment's cycles are spread over them, so a
        process typically lacks some cycles of every target: loading just those (the
        same times for every target of a deployment) keeps the read small."""
        rows = self._rows
        targets, stamps = [], set()
        for target, wanted_stamps in wanted.items():
            kept = rows.get(target, ())
            lacking = [ts for ts in wanted_stamps if ts not in kept]
            if lacking:
                targets.append(target)
                stamps.update(lacking)
        return targets, stamps

    def keep(self, target, ts: float, row: Row) -> None:
        self._rows.setdefault(target, {})[ts] = row

    def history(self, wanted: Mapping[object, list[float]]) -> dict:
        """Each target's kept rows at the wanted cycles, in the wanted order; kept rows
        of those targets at any other cycle (out of the window, or not in the database)
        are dropped."""
        out = {}
        for target, stamps in wanted.items():
            kept = self._rows.get(target, {})
            rows = [(ts, kept[ts]) for ts in stamps if ts in kept]
            self._rows[target] = dict(rows)
            out[target] = rows
        return out

    def forget(self, targets: Iterable) -> None:
        for target in targets:
            self._rows.pop(target, None)

    def forget_older_than(self, ts: float) -> None:
        """Drop rows before ``ts`` for every target (targets no longer polled)."""
        for target in list(self._rows):
            kept = {at: row for at, row in self._rows[target].items() if at >= ts}
            if kept:
                self._rows[target] = kept
            else:
                del self._rows[target]
