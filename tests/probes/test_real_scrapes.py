"""Every real engine scrape users posted (samples/real/{vllm,sglang}_metrics) yields what its
sidecar says it holds: flavour, values, series, or the clear error it deserves."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes import observe
from probes.parsing.engine import (
    FLAVOURS,
    KNOWN_ENGINES,
    UNREAD_FAMILIES,
    V1_ONLY,
    EngineScrapeUnusable,
    base_name,
    detect_flavour,
    engine_signals,
    require_usable,
    unmapped_families,
)
from probes.parsing.exposition import parse_exposition, without_families
from tests.support.samples import REAL, samples_absent

pytestmark = pytest.mark.skipif(samples_absent(REAL), reason="shared samples not mounted")

VLLM = REAL / "vllm_metrics"
SGLANG = REAL / "sglang_metrics"
ENGINE_SCRAPES = sorted([*VLLM.glob("*.prom"), *SGLANG.glob("*.prom")]) if REAL.is_dir() else []


def _read(path):
    exp = parse_exposition(path.read_bytes())
    return exp, engine_signals(exp)


def _unusable(path) -> str:
    exp, sig = _read(path)
    with pytest.raises(EngineScrapeUnusable) as err:
        require_usable(exp, sig)
    with pytest.raises(EngineScrapeUnusable):  # the poll path says the same
        observe.observe_engine(path.read_bytes(), [], 1000.0, 60.0)
    return str(err.value)


@pytest.mark.parametrize("path", ENGINE_SCRAPES, ids=lambda p: p.name)
def test_every_real_scrape_has_a_sidecar_and_no_unknown_engine_family(path):
    assert (path.parent / f"{path.name}.source.txt").is_file()
    assert unmapped_families(path.read_bytes()) == set()


def test_v0_help_type_without_samples_is_a_probe_error_not_an_idle_engine():
    # MeetKai/functionary#263: "the metrics were not enabled. everything was #ed".
    path = VLLM / "meetkai263_v0_0.5.4_help_type_no_samples.prom"
    exp, sig = _read(path)
    assert len(exp.families) == 8 and not any(f.samples for f in exp.families.values())
    assert sig.empty
    message = _unusable(path)
    assert message.startswith(f"no {KNOWN_ENGINES} series in the answer")
    assert "without samples" in message


def test_v1_0_10_glm45_kv_and_prefix_cache_with_deprecated_names_beside():
    _, sig = _read(VLLM / "ps617_v1_0.10.0_glm45_kv_prefix.prom")
    assert sig.flavour == "vllm-v1" and sig.model_names == ("zai-org/GLM-4.5",)
    assert sig.gauges["kv_cache_usage"].value == pytest.approx(9.75010481363281e-06)
    # The new name wins over the deprecated gpu_prefix_cache_* shown next to it.
    assert sig.sources["prefix_cache_queries_total"] == "vllm:prefix_cache_queries_total"
    assert sig.counters["prefix_cache_queries_total"].value == 32
    # Only the deprecated hits counter is in this excerpt: it is read, not its _created.
    assert sig.sources["prefix_cache_hits_total"] == "vllm:gpu_prefix_cache_hits_total"
    assert sig.counters["prefix_cache_hits_total"].value == 0


def test_v1_0_10_params_histogram_only_is_a_clear_error():
    path = VLLM / "ps617_v1_0.10.0_glm45_params_hist.prom"
    exp, sig = _read(path)
    assert sig.flavour == "vllm-v1"  # engine label, and _created series V0 never had
    assert exp.histograms["vllm:request_params_n"][0].count == 4  # parsed, deliberately unread
    assert "vLLM series in the answer, but none that Atlas reads" in _unusable(path)


def test_v0_0_6_qwenvl_gauges_and_the_engines_own_kv_capacity():
    exp, sig = _read(VLLM / "qwen3vl55_v0_0.6_qwenvl_gauges.prom")
    assert sig.flavour == "vllm-v0" and sig.model_names == ("qwenvl",)
    values = {k: g.value for k, g in sig.gauges.items()}
    assert values == {
        "kv_cache_usage": 0.0,
        "requests_running": 0.0,
        "requests_waiting": 0.0,
        "requests_swapped": 0.0,
        # cache_config_info: 2,048 blocks (fixed on the command line) x 16 tokens.
        "kv_blocks": 2048.0,
        "kv_block_size": 16.0,
        "kv_capacity_tokens": 32768.0,
    }
    assert sig.sources["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    # Cut at a HELP line: the family is declared, has no samples, reads as nothing.
    assert exp.family("vllm:cpu_prefix_cache_hit_rate").samples == ()


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("v0_0.5.1_70b_tp8_ttft_all_zero_bug.prom", "vllm:time_to_first_token_seconds"),
        ("v0_0.5.3_70b_h100_prompt_gen_tokens_hist.prom", "vllm:request_generation_tokens"),
    ],
)
def test_histograms_cut_before_their_inf_bucket_are_reported_never_used(name, family):
    exp, sig = _read(VLLM / name)
    assert sig.flavour == "vllm-v0"
    assert family not in exp.histograms
    (problem,) = exp.problems
    assert problem.family == family and "+Inf" in problem.reason
    assert "ttft" not in sig.histograms
    message = _unusable(VLLM / name)
    assert "none that Atlas reads" in message and "+Inf" in message


@pytest.mark.parametrize(
    ("name", "flavour"),
    [
        ("v0_opt125m_ttft_hist_degradation.prom", "vllm-v0"),
        ("v1_0.10.x_two_api_servers_engine1_decode_time.prom", "vllm-v1"),
        ("v0_0.5.3_70b_h100_prompt_gen_tokens_hist.prom", "vllm-v0"),
    ],
)
def test_bucket_lines_without_their_type_line_are_not_a_histogram(name, flavour):
    # Excerpts that start mid-histogram: prometheus_client also sees untyped families.
    exp, sig = _read(VLLM / name)
    assert detect_flavour(exp) == flavour
    untyped = [f for f in exp.families.values() if f.name.endswith("_bucket")]
    assert untyped and all(f.type == "unknown" for f in untyped)
    assert {base_name(f.name) for f in untyped} <= {
        "vllm:time_to_first_token_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_prompt_tokens",
    }
    assert not sig.histograms


def test_v1_engine_label_kept_for_a_second_api_server():
    exp, _ = _read(VLLM / "v1_0.10.x_two_api_servers_engine1_decode_time.prom")
    (fam,) = [f for f in exp.families.values() if f.samples]
    assert {dict(s.labels)["engine"] for s in fam.samples} == {"1"}
    assert len(fam.samples) == 13 and fam.samples[-1].value == 1.0


def test_sglang_0_5_dp8_per_rank_retractions_with_pid_label():
    exp, sig = _read(SGLANG / "sglang_aibrix1614_deepseek_r1_dp8_retracted.prom")
    assert sig.flavour == "sglang" and sig.model_names == ("deepseek-r1",)
    retracted = sig.gauges["requests_retracted"]
    assert retracted.value == 0 and len(retracted.per_rank) == 4
    assert {dict(r)["dp_rank"] for r, _ in retracted.per_rank} == {"4", "5", "6", "7"}
    assert "pid" not in dict(retracted.per_rank[0][0])  # a writer's pid is not a rank
    # num_paused_reqs is known and deliberately not read.
    assert exp.family("sglang:num_paused_reqs") and "paused" not in str(dict(sig.gauges))


def test_sglang_nov_2024_name_label_and_config_gauges():
    _, sig = _read(SGLANG / "sglang_pr1853_2024-11_llama32_3b_name_label.prom")
    assert sig.flavour == "sglang"
    assert sig.model_names == (
        "/shared/public/elr-models/meta-llama/Llama-3.2-3B/5cc0ffe09ee49f7be6ca7c794ee6bd7245e84e60/",
    )
    assert sig.gauges["kv_capacity_tokens"].value == 570979
    assert sig.counters["prompt_tokens_total"].value == 230794
    assert set(sig.gauges) == {"kv_capacity_tokens"}  # max_prefill_tokens etc. are config


def test_sglang_0_4_4_unified_engine_type_idle():
    _, sig = _read(SGLANG / "sglang_pr4444_0.4.4_unified_engine_type.prom")
    assert sig.flavour == "sglang"
    assert {k: g.value for k, g in sig.gauges.items()} == {
        "requests_running": 0.0,
        "kv_used_tokens": 0.0,
        "kv_cache_usage": 0.0,
        "gen_throughput": 0.0,
    }
    assert "requests_waiting" not in sig.gauges  # cut before num_queue_reqs: absent, not 0


CAPTURES = sorted(Path(__file__).resolve().parents[1].glob("realengine/captures/*.metrics.txt"))


@pytest.mark.parametrize("path", [*ENGINE_SCRAPES, *CAPTURES], ids=lambda p: p.name)
def test_blanking_the_unread_families_changes_no_signal(path):
    """The poll path blanks the families no flavour reads before parsing: every real scrape
    gives the snapshot (or the refusal) the whole scrape gives, line numbers kept."""
    text = path.read_text(encoding="utf-8")
    blanked = without_families(text, UNREAD_FAMILIES, base_name)
    assert blanked.count("\n") == text.count("\n")
    exp = parse_exposition(text)
    whole = engine_signals(exp)
    lean = engine_signals(parse_exposition(blanked))
    if not lean.empty:
        assert (lean.flavour, lean.model_names) == (whole.flavour, whole.model_names)
        assert (lean.gauges, lean.counters, lean.histograms) == (
            whole.gauges, whole.counters, whole.histograms,
        )  # fmt: skip
    if whole.empty:  # refused, with the whole answer's reason
        with pytest.raises(EngineScrapeUnusable) as expected:
            require_usable(exp, whole)
        with pytest.raises(EngineScrapeUnusable) as seen:
            observe.observe_engine(path.read_bytes(), [], 1000.0, 60.0)
        assert str(seen.value) == str(expected.value)
        return
    snapshot = observe.observe_engine(path.read_bytes(), [], 1000.0, 60.0).snapshot
    expected = observe.engine_snapshot(whole)
    assert set(snapshot.pop("problems")) <= set(expected.pop("problems"))
    assert snapshot == expected


def test_the_real_engines_scrape_loses_its_unread_half_before_parsing():
    (capture,) = [p for p in CAPTURES if "kv-pressure" in p.name]
    text = capture.read_text(encoding="utf-8")
    kept = parse_exposition(without_families(text, UNREAD_FAMILIES, base_name)).families
    everything = parse_exposition(text).families
    gone = set(everything) - set(kept)
    assert {"python_gc_objects_collected_total", "process_cpu_seconds_total",
            "http_request_duration_highr_seconds", "vllm:request_params_n"} <= gone  # fmt: skip
    assert not any(base_name(name) not in UNREAD_FAMILIES for name in gone)
    assert len(kept) < 0.7 * len(everything)


def test_no_family_a_flavour_reads_or_detects_by_is_ever_blanked():
    for flavour in FLAVOURS:
        read = {base_name(w.name) for spec in flavour.gauges.values() for w in spec.aliases}
        read |= {base_name(w.name) for aliases in flavour.counters.values() for w in aliases}
        read |= {base_name(w.name) for aliases in flavour.histograms.values() for w in aliases}
        read |= {base_name(name) for name in flavour.info}
        assert not read & UNREAD_FAMILIES, flavour.key
    assert not {base_name(name) for name in V1_ONLY} & UNREAD_FAMILIES
