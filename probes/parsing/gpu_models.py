"""A GPU's full (maximum) SM clock from its model name, for when the budget gives none.

dcgm-exporter labels every series with ``modelName`` (``Tesla V100-SXM2-32GB``, ``NVIDIA
A100-SXM4-80GB``, ``NVIDIA H100 80GB HBM3``; with ``--replace-blanks-in-model-name`` the
blanks become dashes) and NVML returns the same string from ``nvmlDeviceGetName``. The
clocks are the "Max Clocks: SM" that ``nvidia-smi -q`` prints for each board, which equal
the boost clocks of NVIDIA's datasheets (V100 SXM2 1,530 MHz, V100 PCIe 1,380, V100S 1,597,
T4 1,590, A100 1,410, A30 1,440, A10 1,695, A10G 1,710, L4 2,040, L40 2,490, L40S 2,520,
H100 SXM 1,980, H100 PCIe 1,755, H100 NVL 1,785, H200 1,980). A model not in the table has
no full clock: checks that need one stay inconclusive; nothing is guessed.
"""

from __future__ import annotations

import re

__all__ = ["MAX_SM_CLOCK_MHZ", "max_sm_clock_mhz"]

MAX_NAME = 128

# Most specific first: the first pattern found in the normalised name wins.
MAX_SM_CLOCK_MHZ: tuple[tuple[str, float], ...] = (
    (r"\bv100s\b", 1597.0),
    (r"\bv100\b.*\bsxm", 1530.0),
    (r"\bv100\b.*\bpcie", 1380.0),
    (r"\bt4\b", 1590.0),
    (r"\ba100\b", 1410.0),
    (r"\ba30\b", 1440.0),
    (r"\ba10g\b", 1710.0),
    (r"\ba10\b", 1695.0),
    (r"\bl40s\b", 2520.0),
    (r"\bl40\b", 2490.0),
    (r"\bl4\b", 2040.0),
    (r"\bh100\b.*\bnvl\b", 1785.0),
    (r"\bh100\b.*\bpcie", 1755.0),
    (r"\bh100\b.*\b(sxm|hbm3)", 1980.0),
    (r"\bh200\b", 1980.0),
)
_COMPILED = tuple((re.compile(p), mhz) for p, mhz in MAX_SM_CLOCK_MHZ)


def max_sm_clock_mhz(model_name: str | None) -> float | None:
    """``Tesla V100-SXM2-32GB`` -> 1530.0; an unknown or absurd name -> None."""
    if not model_name or len(model_name) > MAX_NAME:
        return None
    name = re.sub(r"[-_]+", " ", model_name.lower())
    for pattern, mhz in _COMPILED:
        if pattern.search(name):
            return mhz
    return None
