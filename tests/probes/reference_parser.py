"""prometheus_client's parser held to our structure: the reference for differential tests.

Both parsers share the byte/UTF-8/line bounds (``decode_exposition``) and the series and
label bounds, so hostile inputs are rejected the same way by each.
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from probes.parsing.exposition import (
    DEFAULT_LIMITS,
    ExpositionLimits,
    ExpositionMalformed,
    ExpositionTooLarge,
    Family,
    Sample,
    decode_exposition,
)


def reference_families(
    data: bytes | str, limits: ExpositionLimits = DEFAULT_LIMITS
) -> list[Family]:
    text = decode_exposition(data, limits)
    try:
        metrics = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, KeyError, TypeError) as err:
        raise ExpositionMalformed(f"prometheus_client: {str(err)[:80]}") from None
    families, series = [], 0
    for m in metrics:
        samples = []
        for s in m.samples:
            if len(s.labels) > limits.max_labels_per_series:
                raise ExpositionTooLarge("too many labels")
            samples.append(
                Sample(s.name, tuple(sorted(s.labels.items())), float(s.value), s.timestamp)
            )
        series += len(samples)
        families.append(Family(m.name, m.type, m.documentation, tuple(samples)))
    if series > limits.max_series:
        raise ExpositionTooLarge("too many series")
    return families


def _value_key(v: float | None) -> object:
    return "NaN" if v is not None and math.isnan(v) else v


def normalized(families: list[Family]) -> tuple[list[tuple], list[tuple]]:
    """(empty family headers, flattened samples) with prometheus_client's _total munging undone."""
    headers, flat = [], []
    for f in families:
        counter = f.type == "counter"
        name = f.name.removesuffix("_total") if counter else f.name
        if not f.samples:
            headers.append((f.type, name, f.help))
        for s in f.samples:
            sname = s.name.removesuffix("_total") if counter else s.name
            flat.append(
                (
                    f.type,
                    name,
                    f.help,
                    sname,
                    s.labels,
                    _value_key(s.value),
                    _value_key(s.timestamp),
                )
            )
    return headers, flat
