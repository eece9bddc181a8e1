from __future__ import annotations

import types

import pynvml
import pytest

from probes.parsing.nvml_reading import (
    NoGpu,
    decode_clock_event_reasons,
    memory_fields,
    milliwatts_to_watts,
    process_memory,
    read_gpus,
)


def test_this_worker_without_gpu_is_an_expected_no_gpu_state():
    reading = read_gpus()
    if not isinstance(reading, NoGpu):
        pytest.skip("this machine has a GPU")
    assert reading.expected
    assert reading.error in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")


def test_pure_decoders():
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert decode_clock_event_reasons(0x800) == ("0x800",)
    assert milliwatts_to_watts(245_123) == 245.123
    v2 = types.SimpleNamespace(total=80, reserved=2, used=30, free=48)
    assert memory_fields(v2) == {
        "total_bytes": 80, "reserved_bytes": 2, "used_bytes": 30, "free_bytes": 48
    }  # fmt: skip
    v1 = types.SimpleNamespace(total=80, used=32, free=48)
    assert "reserved_bytes" not in memory_fields(v1)
    procs = [
        types.SimpleNamespace(pid=11, usedGpuMemory=None),
        types.SimpleNamespace(pid=12, usedGpuMemory=5),
    ]
    assert [(p.pid, p.used_bytes) for p in process_memory(procs, "compute")] == [
        (11, None),
        (12, 5),
    ]


class FakeDriver(types.ModuleType):
    """Two GPUs; GPU 1 does not support power readings and has an old driver (v1 memory)."""

    NVMLError = pynvml.NVMLError
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(self) -> None:
        super().__init__("fake_nvml")
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None):
        if version is not None and h == 1:
            raise pynvml.NVMLError_FunctionNotFound()
        if version is not None:
            return types.SimpleNamespace(total=80, reserved=1, used=70, free=9)
        return types.SimpleNamespace(total=80, used=71, free=9)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return 1980 if h == 0 else 1200

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        return 1980

    def nvmlDeviceGetUtilizationRates(self, h: int):
        return types.SimpleNamespace(gpu=99, memory=40)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 70

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise pynvml.NVMLError_NotSupported()
        return 650_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 0 if h == 0 else 0x20

    def nvmlDeviceGetComputeRunningProcesses(self, h: int):
        return [types.SimpleNamespace(pid=100 + h, usedGpuMemory=60 * 2**30)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int):
        raise pynvml.NVMLError_NoPermission()


def test_read_gpus_with_a_fake_driver_keeps_going_per_field():
    driver = FakeDriver()
    gpu0, gpu1 = read_gpus(driver)
    assert driver.shutdowns == 1
    assert gpu0.fields["power_w"] == 650.0 and gpu0.fields["reserved_bytes"] == 1
    assert gpu0.fields["sm_clock_mhz"] == 1980 and gpu0.fields["clock_event_reasons"] == ()
    assert "power_w" not in gpu1.fields
    assert gpu1.errors["power_w"] == "NVMLError_NotSupported"
    assert gpu1.fields["used_bytes"] == 71 and "reserved_bytes" not in gpu1.fields
    assert gpu1.fields["clock_event_reasons"] == ("sw_thermal_slowdown",)
    assert gpu1.errors["graphics_processes"] == "NVMLError_NoPermission"
    assert [p.pid for p in gpu1.processes] == [101]


def test_init_failure_other_than_missing_library_is_not_expected():
    driver = FakeDriver()

    def broken() -> None:
        raise pynvml.NVMLError_LibRmVersionMismatch()

    driver.nvmlInit = broken
    reading = read_gpus(driver)
    assert isinstance(reading, NoGpu) and not reading.expected
    assert reading.error == "NVMLError_LibRmVersionMismatch"
