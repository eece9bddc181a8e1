"""GPUs as deployed, from real excerpts (samples/real/{dcgm,nvidia_smi,server_info}): MIG
slices are their own series, both hostname spellings, idle GPUs confirm nothing."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deployments.budget import Budget
from investigations.evaluation import evaluate
from investigations.playbook import playbooks
from probes import observe
from probes.parsing import dcgm
from probes.parsing.exposition import parse_exposition
from probes.parsing.gpu_models import max_sm_clock_mhz
from probes.parsing.nvidia_smi import NvidiaSmiMalformed, parse_nvidia_smi
from probes.parsing.sglang_info import ServerInfoMalformed, parse_server_info
from tests.support.samples import REAL, samples_absent

pytestmark = pytest.mark.skipif(samples_absent(REAL), reason="shared samples not mounted")

DCGM = REAL / "dcgm"
V100 = DCGM / "dcgm_v100_main_power_pcie_util.prom"
A30_MIG = DCGM / "dcgm_a30_mig_fb_used.prom"
MIXED = DCGM / "dcgm_2026_mixed_rtx2000ada_a30mig_lowercase_hostname.prom"
NOW = 10_000.0


def _records(path):
    return dcgm.gpu_records(parse_exposition(path.read_bytes()))


def _observed(body: bytes) -> dict:
    return {(s, labels): v for s, labels, v in observe.observe_dcgm(body).observations}


def test_a30_mig_slices_are_their_own_series_never_the_parent():
    records = _records(A30_MIG)
    assert [(r.gpu, r.mig_instance, r.mig_profile) for r in records] == [
        ("0", "3", "1g.6gb"),
        ("0", "4", "1g.6gb"),
        ("0", "5", "1g.6gb"),
        ("0", "6", "1g.6gb"),
        ("1", "3", "1g.6gb"),
        ("1", "4", "1g.6gb"),
    ]
    assert all(r.hostname == "yg-data-k8s-gpu-a30-node-test-test0003.mt" for r in records)
    assert all(r.fields["fb_used_mib"] == 3 for r in records)
    seen = _observed(A30_MIG.read_bytes())
    used = {labels: v for (s, labels), v in seen.items() if s == "gpu_fb_used_mib"}
    host = "host=yg-data-k8s-gpu-a30-node-test-test0003.mt"
    assert set(used) == {
        f"gpu={g},{host},mig={m}" for g, m in [*((0, i) for i in (3, 4, 5, 6)), (1, 3), (1, 4)]
    }
    # A slice is not a GPU: no full clock is claimed for it.
    assert not any(s == "gpu_sm_clock_max_mhz" for s, _ in seen)


def test_mixed_node_lowercase_hostname_and_a_mig_slice_beside_a_whole_gpu():
    records = {(r.gpu, r.mig_instance): r for r in _records(MIXED)}
    assert set(records) == {("1", None), ("2", "3")}
    ada, slice_ = records[("1", None)], records[("2", "3")]
    assert ada.hostname == slice_.hostname == "dcgm-exporter-wwwjh"
    assert ada.model_name == "NVIDIA RTX 2000 Ada Generation"
    assert dict(ada.fields) == {"dec_util_pct": 46, "enc_util_pct": 9, "fb_free_mib": 11275}
    assert slice_.mig_profile == "1g.6gb" and dict(slice_.fields) == {"fb_free_mib": 2207}
    # No profiling fields: the exporter's limitation is missing data, not zero activity.
    assert not any("sm_active" in r.fields or "gpu_util_pct" in r.fields for r in records.values())
    assert max_sm_clock_mhz(ada.model_name) is None  # not in the table: nothing guessed


def test_v100_idle_node_values_and_its_full_clock_from_the_model():
    records = {r.gpu: r for r in _records(V100)}
    assert set(records) == {"0", "1", "2", "3"}
    assert records["2"].fields["power_limit_w"] == 300 and records["0"].fields["gpu_util_pct"] == 0
    assert all(r.fields["pcie_replays"] == 0 for r in records.values())
    assert all(
        r.hostname == "r6i3n0" and r.model_name == "Tesla V100-SXM2-32GB" for r in records.values()
    )
    seen = _observed(V100.read_bytes())
    assert seen[("gpu_sm_clock_max_mhz", "gpu=0,host=r6i3n0")] == 1530


def _v100_line(field: str, value: str) -> str:
    """A real V100 series (its labels verbatim from the excerpt) for another field."""
    lines = V100.read_text().splitlines()
    util = next(x for x in lines if x.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    labels = util[len("DCGM_FI_DEV_GPU_UTIL") : util.rindex("}") + 1]
    return f"# TYPE {field} gauge\n{field}{labels} {value}\n"


def _itl_spikes(body: bytes, budget: Budget):
    points = {}
    for signal, labels, value in observe.observe_dcgm(body).observations:
        points.setdefault(("dcgm", signal), []).append((labels, [(NOW - 10, value), (NOW, value)]))
    return evaluate(playbooks()["itl-spikes"], budget, points, NOW)


@pytest.mark.parametrize("budget", [Budget(), Budget(sm_clock_mhz=0)], ids=["budget", "model"])
def test_an_idle_v100_at_135_mhz_never_confirms_throttling(budget):
    # The sidecar's idle node: SM clock 135 MHz, utilisation 0, and the gpu_idle reason.
    body = (
        V100.read_text()
        + "\n"
        + _v100_line("DCGM_FI_DEV_SM_CLOCK", "135")
        + _v100_line("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "1")
    ).encode()
    seen = _observed(body)
    assert seen[("gpu_clock_events", "gpu=0,host=r6i3n0")] == 0  # gpu_idle is not throttling
    result = _itl_spikes(body, budget)
    for node in ("gpu-throttling", "tp-straggler"):
        found = result.find(node)
        assert found.suggestion == "inconclusive"
        assert all(c.outcome == "inconclusive" and c.measured is None for c in found.checks)
    assert not any(result.find(k).suggestion == "confirm" for k in result.ranking)


def test_the_same_clock_under_load_does_confirm_against_the_models_full_clock():
    # Control: the guard reads loaded points; 135 MHz at 97 % utilisation is throttling.
    body = (
        V100.read_text().rsplit("\n", 2)[0]  # without its last line (gpu 0 at 0 %)
        + "\n"
        + _v100_line("DCGM_FI_DEV_GPU_UTIL", "97").split("\n", 1)[1]
        + _v100_line("DCGM_FI_DEV_SM_CLOCK", "135")
    ).encode()
    result = _itl_spikes(body, Budget(sm_clock_mhz=0))
    deficit = result.find("gpu-throttling").checks[0]
    assert deficit.outcome == "confirm" and deficit.confirm_threshold == pytest.approx(1530 * 0.95)


@pytest.mark.parametrize(
    ("mask", "count"),
    [(0x1, 0), (0x2, 0), (0x11, 0), (0x4, 1), (0x21, 1), (0x60, 2), (0x1000, None)],
)
def test_clock_event_reasons_count_only_thermal_and_power(mask, count):
    body = _v100_line("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", str(mask)).encode()
    assert _observed(body).get(("gpu_clock_events", "gpu=0,host=r6i3n0")) == count


def test_nvidia_smi_a100_idle_table():
    table = parse_nvidia_smi(
        (REAL / "nvidia_smi" / "nvidia_smi_a100_sxm4_80gb_idle_gpu_operator348.txt").read_bytes()
    )
    assert (table.driver_version, table.cuda_version) == ("510.47.03", "11.6")
    (gpu,) = table.gpus  # the second GPU's block is cut by the excerpt: left out
    assert gpu.index == 0 and gpu.name == "NVIDIA A100-SXM" and gpu.name_truncated
    assert (gpu.temperature_c, gpu.pstate, gpu.power_w, gpu.power_cap_w) == (33, "P0", 67, 400)
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.util_pct) == (0, 81920, 0)
    assert gpu.mig_mode == "Disabled" and gpu.bus_id == "00000000:54:00.0"
    assert max_sm_clock_mhz(gpu.name) == 1410


def test_nvidia_smi_newer_layout_and_a_block_cut_in_half():
    text = (
        "| NVIDIA-SMI 550.54.15              Driver Ver"
        "sion: 550.54.15      CUDA Version: 12.4     |\n"
        "|   0  NVIDIA H100 80GB HBM3          On  |   "
        "00000000:18:00.0 Off |                    0 |\n"
        "| N/A   27C    P0             69W /  700W |   "
        "    4MiB /  81559MiB |      0%      Default |\n"
        "|                                         |   "
        "                     |             Disabled |\n"
        "|   1  NVIDIA H100 80GB HBM3          On  |   "
        "00000000:2A:00.0 Off |                    0 |\n"
    )
    (gpu,) = parse_nvidia_smi(text).gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3" and not gpu.name_truncated
    assert gpu.power_cap_w == 700 and gpu.memory_total_mib == 81559
    assert max_sm_clock_mhz(gpu.name) == 1980


HOSTILE_TEXTS = [
    "",
    "| 0 x On |",
    "|" * 300_000,  # over the byte bound
    "|   0  " + "A" * 100_000 + "  On   | 00000000:54:00.0 Off | 0 |\n| N/A 33C P0 67W / 400W |",
    "\x00\xff garbage |||| MiB / MiB %",
    '# HELP DCGM_FI_DEV_GPU_UTIL x\nDCGM_FI_DEV_GPU_UTIL{gpu="0"} 0\n',
]


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=range(len(HOSTILE_TEXTS)))
def test_nvidia_smi_hostile_or_foreign_text_is_a_clear_error(text):
    with pytest.raises(NvidiaSmiMalformed):
        parse_nvidia_smi(text)


NVIDIA_SMI_SEED = REAL / "nvidia_smi" / "nvidia_smi_a100_sxm4_80gb_idle_gpu_operator348.txt"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="| 0123456789NAVIDx-:.CPWMiB/%OnfDeEabl\n", max_size=400))
@example(text="SEED")
def test_nvidia_smi_fuzz_parses_or_refuses(text):
    if text == "SEED":  # the unmutated capture: parsed, its one A100's 80 GiB intact
        table = parse_nvidia_smi(NVIDIA_SMI_SEED.read_bytes())
        assert [g.memory_total_mib for g in table.gpus] == [81920]
        return
    try:
        table = parse_nvidia_smi(text)
    except NvidiaSmiMalformed:
        return
    assert table.gpus and all(g.memory_total_mib >= 0 for g in table.gpus)


def test_sglang_docs_server_info_qwen05b():
    info = parse_server_info(
        (REAL / "server_info" / "sglang_docsci_2026-03_get_server_info_qwen05b.json").read_bytes()
    )
    assert info.arg("model_path") == "qwen/qwen2.5-0.5b-instruct"
    assert info.arg("version") == "0.0.0.dev1+g753da2753" and info.arg("status") == "ready"
    assert info.arg("tp_size") == 1 and info.arg("max_total_num_tokens") == 20480
    (rank,) = info.ranks
    assert (rank.weight_gb, rank.kvcache_gb, rank.graph_gb, rank.token_capacity) == (
        0.98,
        0.23,
        0.06,
        20480,
    )
    assert info.effective_max_running_requests == 128
    assert rank.values["last_gen_throughput"] == pytest.approx(708.9987, rel=1e-5)


def test_grpc_server_info_truncated_is_a_clear_error_and_its_shape_is_read():
    text = (REAL / "server_info" / "sglang_grpc_GetServerInfo_pr11303_truncated.json").read_text()
    with pytest.raises(ServerInfoMalformed, match="truncated"):
        parse_server_info(text)
    # The same shape, closed: args nested under server_args (grpcurl's rendering).
    closed = text[: text.rindex(",")] + "}}"
    info = parse_server_info(closed)
    assert info.arg("chunked_prefill_size") == 8192 and info.ranks == ()
