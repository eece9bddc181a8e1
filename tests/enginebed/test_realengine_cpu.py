"""The engine's dtype follows what the CPU computes in hardware (realengine.cpu): bf16 on
an AVX2-only CPU is emulated and ran prefill 4x slower than float32 here."""

from __future__ import annotations

from realengine import cpu
from realengine.server import EngineFlags

AVX2_ONLY = """processor\t: 0
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 avx avx2 fma
processor\t: 1
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 avx avx2 fma
"""
SAPPHIRE_RAPIDS = """processor\t: 0
flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile
"""


def test_bf16_only_where_every_core_has_it_in_hardware():
    assert cpu.native_dtype(cpu.parse_cpu_flags(AVX2_ONLY)) == "float32"
    assert cpu.native_dtype(cpu.parse_cpu_flags(SAPPHIRE_RAPIDS)) == "bfloat16"
    # A machine whose cores differ counts only what all of them run.
    mixed = SAPPHIRE_RAPIDS + AVX2_ONLY.replace("processor\t: 0", "processor\t: 1", 1)
    assert cpu.native_dtype(cpu.parse_cpu_flags(mixed)) == "float32"
    # Arm spells them "Features"; bf16 there is not one of the x86 flags we know.
    assert cpu.parse_cpu_flags("Features\t: fp asimd bf16\n") == {"fp", "asimd", "bf16"}


def test_unreadable_or_hostile_cpuinfo_falls_back_to_float32():
    assert cpu.native_dtype(cpu.parse_cpu_flags("")) == "float32"
    assert cpu.native_dtype(cpu.parse_cpu_flags("flags: \x00\ud800 ::: avx512_bf16x\n")) == (
        "float32"
    )
    assert cpu.parse_cpu_flags("flags" * 100_000) == frozenset()


def test_flags_pass_the_machine_dtype_unless_a_scenario_names_one():
    args = EngineFlags().args()
    assert args[args.index("--dtype") + 1] == cpu.machine_dtype()
    args = EngineFlags(dtype="bfloat16").args()
    assert args[args.index("--dtype") + 1] == "bfloat16"


def test_machine_dtype_reads_proc_cpuinfo_bounded(tmp_path, monkeypatch):
    fake = tmp_path / "cpuinfo"
    fake.write_text(SAPPHIRE_RAPIDS + "x" * (cpu.CPUINFO_LIMIT + 10))
    monkeypatch.setattr(cpu, "CPUINFO", fake)
    cpu.machine_dtype.cache_clear()
    try:
        assert cpu.machine_dtype() == "bfloat16"
        monkeypatch.setattr(cpu, "CPUINFO", tmp_path / "absent")
        cpu.machine_dtype.cache_clear()
        assert cpu.machine_dtype() == "float32"
    finally:
        cpu.machine_dtype.cache_clear()
