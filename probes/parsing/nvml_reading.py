"""GPU state through NVML (``import pynvml`` from nvidia-ml-py) as plain records.

This is the one module here that performs I/O: :func:`read_gpus` calls the driver. Every
decoding step is a pure function tested with constructed inputs; ``read_gpus`` takes the
NVML module as a parameter so a test can hand it a fake driver with real behaviour.

A worker without a GPU raises ``NVMLError_LibraryNotFound`` (no libnvidia-ml) or
``NVMLError_DriverNotLoaded``: that is :class:`NoGpu` with ``expected=True``, "no GPU on this
worker", not an incident. Any other NVMLError on one field leaves that field out and names
the error in ``DeviceReading.errors``, so one unsupported query (MIG, old driver) cannot
hide the rest (reference/engine-metrics.md §4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any

from probes.parsing.bitmask import decode_bits

__all__ = [
    "CLOCK_EVENT_REASONS",
    "DeviceReading",
    "NoGpu",
    "ProcessMemory",
    "decode_clock_event_reasons",
    "memory_fields",
    "milliwatts_to_watts",
    "process_memory",
    "read_gpus",
]

CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),  # legacy ...ThrottleReason only
    (0x400, "reliability"),  # legacy ...ThrottleReason only
)
_NO_GPU_ERRORS = ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
_NVML_CLOCK_SM = 1
_NVML_CLOCK_MEM = 2
_NVML_TEMPERATURE_GPU = 0


@dataclass(frozen=True, slots=True)
class NoGpu:
    """NVML could not start; ``expected`` means the worker simply has no GPU."""

    error: str
    message: str
    expected: bool


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    pid: int
    used_bytes: int | None
    kind: str


@dataclass(frozen=True, slots=True)
class DeviceReading:
    index: int
    fields: Mapping[str, Any]
    errors: Mapping[str, str]
    processes: tuple[ProcessMemory, ...]


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Names for the bitmask; unknown bits are kept as hex rather than dropped."""
    return decode_bits(mask, CLOCK_EVENT_REASONS)


def milliwatts_to_watts(milliwatts: int | float) -> float:
    return float(milliwatts) / 1000.0


def memory_fields(info: Any) -> dict[str, int]:
    """v2 separates driver-reserved memory; v1's ``used`` silently includes it."""
    out = {"total_bytes": int(info.total), "used_bytes": int(info.used)}
    out["free_bytes"] = int(info.free)
    reserved = getattr(info, "reserved", None)
    if reserved is not None:
        out["reserved_bytes"] = int(reserved)
    return out


def process_memory(entries: Iterable[Any], kind: str) -> tuple[ProcessMemory, ...]:
    """``usedGpuMemory`` is None when the driver cannot attribute memory (containers, MIG)."""
    out = []
    for entry in entries:
        used = getattr(entry, "usedGpuMemory", None)
        out.append(ProcessMemory(int(entry.pid), None if used is None else int(used), kind))
    return tuple(out)


def _error_name(err: BaseException) -> str:
    return type(err).__name__


def _read_device(nvml: ModuleType, index: int) -> DeviceReading:
    fields: dict[str, Any] = {}
    errors: dict[str, str] = {}
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def field(name: str, getter: Callable[[], Any], convert: Callable[[Any], Any] = lambda v: v):
        try:
            value = convert(getter())
        except nvml.NVMLError as err:
            errors[name] = _error_name(err)
            return
        if isinstance(value, dict):
            fields.update(value)
        else:
            fields[name] = value

    def memory() -> Any:
        try:
            return nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        except (nvml.NVMLError, TypeError, AttributeError):
            return nvml.nvmlDeviceGetMemoryInfo(handle)

    def clock_events() -> int:
        getter = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if getter is None:
            return nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
        try:
            return getter(handle)
        except nvml.NVMLError_FunctionNotFound:
            return nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)

    def utilization() -> dict[str, int]:
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        return {"gpu_util_pct": int(rates.gpu), "mem_util_pct": int(rates.memory)}

    field("name", lambda: nvml.nvmlDeviceGetName(handle), str)
    field("uuid", lambda: nvml.nvmlDeviceGetUUID(handle), str)
    field("memory", memory, memory_fields)
    field("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, _NVML_CLOCK_SM), int)
    field("sm_clock_max_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, _NVML_CLOCK_SM), int)
    field("mem_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, _NVML_CLOCK_MEM), int)
    field("utilization", utilization)
    field(
        "temperature_c",
        lambda: nvml.nvmlDeviceGetTemperature(handle, _NVML_TEMPERATURE_GPU),
        int,
    )
    field("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle), milliwatts_to_watts)
    field(
        "power_limit_w",
        lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle),
        milliwatts_to_watts,
    )
    field("clock_event_reasons", clock_events, decode_clock_event_reasons)
    processes: list[ProcessMemory] = []
    for kind, getter_name in (
        ("compute", "nvmlDeviceGetComputeRunningProcesses"),
        ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    ):
        try:
            processes.extend(process_memory(getattr(nvml, getter_name)(handle), kind))
        except nvml.NVMLError as err:
            errors[f"{kind}_processes"] = _error_name(err)
    return DeviceReading(
        index, MappingProxyType(fields), MappingProxyType(errors), tuple(processes)
    )


def read_gpus(nvml: ModuleType | None = None) -> NoGpu | tuple[DeviceReading, ...]:
    """One reading of every device, or :class:`NoGpu` when NVML cannot start."""
    if nvml is None:
        import pynvml

        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        name = _error_name(err)
        return NoGpu(name, str(err), expected=name in _NO_GPU_ERRORS)
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as err:
            return NoGpu(_error_name(err), str(err), expected=False)
        readings = []
        for index in range(count):
            try:
                readings.append(_read_device(nvml, index))
            except nvml.NVMLError as err:  # handle lookup failed, e.g. GPU is lost
                error = MappingProxyType({"device": _error_name(err)})
                readings.append(DeviceReading(index, MappingProxyType({}), error, ()))
        return tuple(readings)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
