"""Decoding flag words (NVML clock-event reasons, as NVML and dcgm-exporter report them)."""

from __future__ import annotations

from collections.abc import Sequence


def decode_bits(mask: int, table: Sequence[tuple[int, str]]) -> tuple[str, ...]:
    """Names of the set bits; unknown bits come back as hex so nothing is dropped silently."""
    names = [name for bit, name in table if mask & bit]
    known = 0
    for bit, _ in table:
        known |= bit
    if mask & ~known:
        names.append(hex(mask & ~known))
    return tuple(names)
