"""``nvidia-smi``'s default table, as users paste it, into one record per GPU.

Users paste the table when they report a GPU problem ("no process is using the GPU, but the
exporter says otherwise"); it carries the same facts NVML gives (temperature, performance
state, power draw and cap, memory used and total, utilisation, MIG mode). The name column
is cut by nvidia-smi itself (``NVIDIA A100-SXM...``), so ``name_truncated`` says so.
Only whole GPU blocks are read: a block cut by the paste is left out, never half-read.
Bounded in bytes and GPUs; a text without a single GPU row is :class:`NvidiaSmiMalformed`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NvidiaSmiGpu", "NvidiaSmiMalformed", "NvidiaSmiTable", "parse_nvidia_smi"]

MAX_BYTES = 256 * 1024
MAX_GPUS = 64
MAX_LINE = 512

_HEADER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)\s+CUDA Version:\s+(\S+)")
# |   0  NVIDIA A100-SXM...  On   | 00000000:54:00.0 Off |                    0 |
_ROW1 = re.compile(
    r"^\|\s*(\d{1,3})\s+(\S(?:.{0,80}?\S)?)\s+(On|Off)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(\S+)\s*\|\s*(\S+)\s*\|$"
)
# | N/A   33C    P0    67W / 400W |      0MiB / 81920MiB |      0%      Default |
_ROW2 = re.compile(
    r"^\|\s*(N/A|\d{1,3}%)\s+(N/A|\d{1,3})C\s+(P\d{1,2})\s+(N/A|\d{1,5})W\s*/\s*(N/A|\d{1,5})W\s*"
    r"\|\s*(\d{1,9})MiB\s*/\s*(\d{1,9})MiB\s*\|\s*(N/A|\d{1,3})%\s+(\S{1,40})\s*\|$"
)
# |                               |                      |             Disabled |
_ROW3 = re.compile(r"^\|\s*\|\s*\|\s*(Enabled|Disabled|N/A)\s*\|$")


class NvidiaSmiMalformed(ValueError):
    """Not an nvidia-smi table, or none of its GPU blocks is whole."""


@dataclass(frozen=True, slots=True)
class NvidiaSmiGpu:
    index: int
    name: str
    name_truncated: bool
    bus_id: str
    temperature_c: float | None
    pstate: str
    power_w: float | None
    power_cap_w: float | None
    memory_used_mib: float
    memory_total_mib: float
    util_pct: float | None
    compute_mode: str
    mig_mode: str | None


@dataclass(frozen=True, slots=True)
class NvidiaSmiTable:
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[NvidiaSmiGpu, ...]


def _num(text: str) -> float | None:
    text = text.rstrip("%")
    return None if text == "N/A" else float(text)


def parse_nvidia_smi(data: bytes | str) -> NvidiaSmiTable:
    if len(data) > MAX_BYTES:
        raise NvidiaSmiMalformed(f"{len(data)} bytes (max {MAX_BYTES})")
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    lines = [line.strip()[:MAX_LINE] for line in text.splitlines()]
    header = next((m for line in lines if (m := _HEADER.search(line))), None)
    gpus: list[NvidiaSmiGpu] = []
    for i, line in enumerate(lines):
        first = _ROW1.match(line)
        second = _ROW2.match(lines[i + 1]) if first and i + 1 < len(lines) else None
        if not (first and second):
            continue
        third = _ROW3.match(lines[i + 2]) if i + 2 < len(lines) else None
        name = first.group(2)
        gpus.append(
            NvidiaSmiGpu(
                index=int(first.group(1)),
                name=name.removesuffix("..."),
                name_truncated=name.endswith("..."),
                bus_id=first.group(4),
                temperature_c=_num(second.group(2)),
                pstate=second.group(3),
                power_w=_num(second.group(4)),
                power_cap_w=_num(second.group(5)),
                memory_used_mib=float(second.group(6)),
                memory_total_mib=float(second.group(7)),
                util_pct=_num(second.group(8)),
                compute_mode=second.group(9),
                mig_mode=third.group(1) if third else None,
            )
        )
        if len(gpus) > MAX_GPUS:
            raise NvidiaSmiMalformed(f"more than {MAX_GPUS} GPUs")
    if not gpus:
        raise NvidiaSmiMalformed("no whole GPU block in the text: not an nvidia-smi table?")
    return NvidiaSmiTable(
        header.group(2) if header else None, header.group(3) if header else None, tuple(gpus)
    )
