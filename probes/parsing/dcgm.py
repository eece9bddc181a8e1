"""dcgm-exporter scrape -> one record per GPU (reference/engine-metrics.md §3).

GPU evidence (clock skew across TP ranks, thermal or power throttling, framebuffer
pressure, XIDs) is compared per device, so series are regrouped by GPU. A MIG instance
(``GPU_I_ID``, ``GPU_I_PROFILE``) is a device of its own: its framebuffer is its slice, not
the parent's, so it is never merged into the parent GPU's record. Label spellings changed
over exporter versions (``UUID``/``uuid``, ``Hostname``/``hostname``); DCGM reports
"blank"/"not supported" with sentinel values that must never reach a chart, so they become
missing fields (named in ``GpuRecord.missing``).

Clock-event reasons are not all throttling: ``gpu_idle`` is set whenever nothing runs (an
idle V100 sits at 135 MHz with it), and clock settings, sync boost and display clocks are
configuration. Only the thermal and power reasons (:data:`THROTTLE_EVENTS`) count as
throttling; an unknown bit makes the count unknown rather than zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from probes.parsing.bitmask import decode_bits
from probes.parsing.exposition import Exposition, Labels
from probes.parsing.gpu_models import max_sm_clock_mhz

__all__ = [
    "CLOCK_EVENT_BITS",
    "FIELDS",
    "THROTTLE_EVENTS",
    "GpuRecord",
    "decode_clock_events",
    "gpu_records",
    "is_sentinel",
    "throttle_count",
]

# DCGM field (and the --use-old-namespace 1.x name) -> record field, with its unit.
FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz",
    "DCGM_FI_DEV_GPU_TEMP": "gpu_temp_c",
    "DCGM_FI_DEV_MEMORY_TEMP": "memory_temp_c",
    "DCGM_FI_DEV_SLOWDOWN_TEMP": "slowdown_temp_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replays",
    "DCGM_FI_DEV_GPU_UTIL": "gpu_util_pct",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "mem_copy_util_pct",
    "DCGM_FI_DEV_ENC_UTIL": "enc_util_pct",
    "DCGM_FI_DEV_DEC_UTIL": "dec_util_pct",
    "DCGM_FI_DEV_XID_ERRORS": "xid_last",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_RESERVED": "fb_reserved_mib",
    "DCGM_FI_DEV_FB_TOTAL": "fb_total_mib",
    "DCGM_FI_DEV_PSTATE": "pstate",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "clock_event_reasons",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "clock_event_reasons",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation_ns",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation_ns",
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": "board_limit_violation_ns",
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": "reliability_violation_ns",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe_volatile",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe_volatile",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remapped_rows_uncorrectable",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remapped_rows_correctable",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "row_remap_failure",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "nvlink_bandwidth_total",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_PROF_SM_OCCUPANCY": "sm_occupancy",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "pcie_tx_bytes_per_s",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "pcie_rx_bytes_per_s",
    "dcgm_sm_clock": "sm_clock_mhz",
    "dcgm_memory_clock": "mem_clock_mhz",
    "dcgm_gpu_temp": "gpu_temp_c",
    "dcgm_power_usage": "power_w",
    "dcgm_gpu_utilization": "gpu_util_pct",
    "dcgm_fb_used": "fb_used_mib",
    "dcgm_fb_free": "fb_free_mib",
}

# clock_events_collector.go names for the NVML clock-event bitmask.
CLOCK_EVENT_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
# The reasons that mean heat or power holds the clock down (both NVML spellings).
THROTTLE_EVENTS = frozenset(
    {
        "power_cap", "sw_power_cap", "hw_slowdown", "sw_thermal", "sw_thermal_slowdown",
        "hw_thermal", "hw_thermal_slowdown", "hw_power_brake", "hw_power_brake_slowdown",
        "board_limit", "reliability",
    }
)  # fmt: skip
_NOT_THROTTLE = frozenset(
    {"gpu_idle", "clocks_setting", "applications_clocks_setting", "sync_boost", "display_clocks",
     "display_clock_setting"}
)  # fmt: skip


def throttle_count(events: tuple[str, ...]) -> int | None:
    """How many thermal/power reasons are active; None if a bit is one we cannot name."""
    if any(e not in THROTTLE_EVENTS and e not in _NOT_THROTTLE for e in events):
        return None
    return sum(1 for e in events if e in THROTTLE_EVENTS)


# DCGM_INT32_BLANK / DCGM_FP64_BLANK and their NOT_FOUND/NOT_SUPPORTED/NOT_PERMISSIONED
# successors. Matched exactly: a real int64 counter (energy in mJ) passes 2**31 in hours.
_EXACT_SENTINELS = frozenset(
    [float(0x7FFFFFF0 + i) for i in range(4)] + [140737488355328.0 + i for i in range(4)]
)
_INT64_SENTINEL_FLOOR = 9.2e18  # DCGM_INT64_BLANK = 0x7ffffffffffffff0 and up


def is_sentinel(value: float) -> bool:
    return math.isnan(value) or value >= _INT64_SENTINEL_FLOOR or value in _EXACT_SENTINELS


def decode_clock_events(mask: int) -> tuple[str, ...]:
    """Bitmask -> names; unknown bits come back as hex so nothing is dropped silently."""
    return decode_bits(mask, CLOCK_EVENT_BITS)


@dataclass(frozen=True, slots=True)
class GpuRecord:
    gpu: str
    uuid: str | None
    hostname: str | None
    model_name: str | None
    mig_instance: str | None
    labels: Labels
    fields: Mapping[str, float]
    missing: tuple[str, ...]
    clock_events: tuple[str, ...]
    xid: tuple[int, str] | None
    mig_profile: str | None = None

    @property
    def max_sm_clock_mhz(self) -> float | None:
        """The model's full SM clock (``gpu_models``), or None for an unknown model."""
        return max_sm_clock_mhz(self.model_name)

    @property
    def fb_used_fraction(self) -> float | None:
        used, free = self.fields.get("fb_used_mib"), self.fields.get("fb_free_mib")
        if used is None or free is None or used + free <= 0:
            return None
        return used / (used + free)


def _pick(labels: dict[str, str], *names: str) -> str | None:
    for name in names:
        if name in labels:
            return labels[name]
    return None


def gpu_records(exp: Exposition) -> tuple[GpuRecord, ...]:
    """Group every known DCGM field by (hostname, gpu, uuid, MIG instance)."""
    acc: dict[tuple, dict] = {}
    for wire, field_name in FIELDS.items():
        for s in exp.samples(wire):
            labels = dict(s.labels)
            if "gpu" not in labels:
                continue  # NVSwitch / CPU series use other label sets
            uuid = _pick(labels, "UUID", "uuid", "gpu_uuid")
            host = _pick(labels, "Hostname", "hostname")
            mig = labels.get("GPU_I_ID")
            key = (host, labels["gpu"], uuid, mig)
            rec = acc.setdefault(
                key,
                {
                    "labels": s.labels,
                    "model": _pick(labels, "modelName", "model_name"),
                    "profile": labels.get("GPU_I_PROFILE"),
                    "fields": {},
                    "missing": [],
                    "xid": None,
                },
            )
            if is_sentinel(s.value):
                rec["missing"].append(field_name)
                continue
            rec["fields"][field_name] = s.value
            if field_name == "xid_last" and s.value > 0:
                rec["xid"] = (int(s.value), labels.get("err_msg", ""))
    out = []
    for (host, gpu, uuid, mig), rec in sorted(acc.items(), key=lambda kv: str(kv[0])):
        mask = rec["fields"].get("clock_event_reasons")
        events = decode_clock_events(int(mask)) if mask is not None else ()
        out.append(
            GpuRecord(
                gpu=gpu,
                uuid=uuid,
                hostname=host,
                model_name=rec["model"],
                mig_instance=mig,
                labels=rec["labels"],
                fields=MappingProxyType(rec["fields"]),
                missing=tuple(sorted(set(rec["missing"]))),
                clock_events=events,
                xid=rec["xid"],
                mig_profile=rec["profile"],
            )
        )
    return tuple(out)
