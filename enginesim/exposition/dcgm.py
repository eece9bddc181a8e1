"""dcgm-exporter format per GPU (default counters, engine-metrics.md §3).

Label order follows the exporter's template (not sorted); int64 fields print as `%d`, doubles as
Go `%f` (six decimals).
"""

from __future__ import annotations

from enginesim.config import MiB

DRIVER_VERSION = "550.127.08"

# (field, type, help, kind) kind: "i" int, "f" double
FIELDS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "i"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "i"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "i"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "f"),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "i",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "i"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "i"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "i"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "i"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "i"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "i"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "i"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "i"),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
        "i",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", "i"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "i",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "i",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "i"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "f"),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "f",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "f",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
        "i",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
        "i",
    ),
)

FB_RESERVED_MIB = 512  # driver-reserved framebuffer


def _values(gpus, rank, sim_t: float) -> dict[str, float]:
    c = gpus.c
    mem = gpus.mem
    total_mib = c.device_total_bytes // MiB
    used = mem.used // MiB
    util = rank.util
    return {
        "DCGM_FI_DEV_SM_CLOCK": rank.throttled_clock_mhz or c.sm_clock_max_mhz,
        "DCGM_FI_DEV_MEM_CLOCK": c.mem_clock_mhz,
        "DCGM_FI_DEV_MEMORY_TEMP": round(rank.temp_c + 4),
        "DCGM_FI_DEV_GPU_TEMP": round(rank.temp_c),
        "DCGM_FI_DEV_POWER_USAGE": rank.power_w,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(rank.energy_mj),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "DCGM_FI_DEV_GPU_UTIL": round(util * 100),
        "DCGM_FI_DEV_MEM_COPY_UTIL": round(rank.dram_active * 100),
        "DCGM_FI_DEV_ENC_UTIL": 0,
        "DCGM_FI_DEV_DEC_UTIL": 0,
        "DCGM_FI_DEV_XID_ERRORS": 0,
        "DCGM_FI_DEV_FB_FREE": max(0, total_mib - FB_RESERVED_MIB - used),
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_RESERVED": FB_RESERVED_MIB,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": int(rank.energy_mj * 3.1),
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": rank.tensor_active,
        "DCGM_FI_PROF_DRAM_ACTIVE": rank.dram_active,
        "DCGM_FI_PROF_PCIE_TX_BYTES": int(2.0e6 + 4.0e7 * util),
        "DCGM_FI_PROF_PCIE_RX_BYTES": int(3.0e6 + 6.0e7 * util),
    }


def render(gpus, hostname: str, sim_t: float) -> str:
    label_sets = []
    vals = []
    for r in gpus.ranks:
        label_sets.append(
            f'{{gpu="{r.index}",UUID="{r.uuid}",pci_bus_id="{r.pci_bus_id}",'
            f'device="nvidia{r.index}",modelName="{gpus.c.device_name}",Hostname="{hostname}",'
            f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"}}'
        )
        vals.append(_values(gpus, r, sim_t))
    out = []
    for name, typ, help_, kind in FIELDS:
        out.append(f"# HELP {name} {help_}\n# TYPE {name} {typ}\n")
        for ls, v in zip(label_sets, vals, strict=True):
            x = v[name]
            out.append(f"{name}{ls} {x:f}\n" if kind == "f" else f"{name}{ls} {int(x)}\n")
    return "".join(out)
