from __future__ import annotations

import pytest

from probes.parsing.dcgm import decode_clock_events, gpu_records, is_sentinel
from probes.parsing.exposition import parse_exposition
from tests.support.samples import METRICS, samples_absent

SAMPLE = METRICS / "dcgm_exporter_tesla-t4_datadog_fixture.prom"


@pytest.mark.skipif(samples_absent(SAMPLE), reason="shared samples not mounted")
def test_real_t4_fixture_groups_by_host_and_gpu():
    records = gpu_records(parse_exposition(SAMPLE.read_bytes()))
    by_host = {r.hostname: r for r in records}
    assert set(by_host) == {"424773df46e0", "551bdf382151"}
    first = by_host["424773df46e0"]
    assert first.gpu == "0" and first.uuid == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    assert first.model_name == "Tesla T4"
    assert first.fields["sm_clock_mhz"] == 300 and first.fields["power_w"] == 8.969
    assert first.fields["fb_free_mib"] == 15109 and first.fb_used_fraction == 0.0
    assert first.xid is None
    second = by_host["551bdf382151"]
    assert second.fields["power_limit_w"] == 70.0
    assert second.clock_events == ("gpu_idle",)


def test_sentinels_and_label_spellings():
    text = (
        "# TYPE DCGM_FI_DEV_MEMORY_TEMP gauge\n"
        'DCGM_FI_DEV_MEMORY_TEMP{gpu="1",uuid="GPU-x",hostname="h"} 9223372036854775794\n'
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",uuid="GPU-x",hostname="h"} 71\n'
        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        'DCGM_FI_DEV_SM_CLOCK{gpu="1",uuid="GPU-x",hostname="h"} 2147483632\n'
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",uuid="GPU-x",hostname="h",err_code="79",'
        'err_msg="GPU has fallen off the bus"} 79\n'
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",uuid="GPU-x",hostname="h"} 2147483700\n'
    )
    (rec,) = gpu_records(parse_exposition(text))
    assert rec.uuid == "GPU-x" and rec.hostname == "h"
    assert rec.missing == ("memory_temp_c", "sm_clock_mhz")
    assert rec.fields["gpu_temp_c"] == 71
    assert rec.fields["energy_mj"] == 2147483700  # real int64 counter, not a sentinel
    assert rec.xid == (79, "GPU has fallen off the bus")
    assert is_sentinel(float("nan")) and is_sentinel(140737488355328.0)
    assert decode_clock_events(0x44 | 0x1000) == ("power_cap", "hw_thermal", "0x1000")
