"""The playbook's own arithmetic is the first test of the budget module."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deployments import budget as b

ATLAS = b.Budget()


def test_kv_capacity_per_rank_is_114688_tokens():
    assert b.kv_capacity_tokens(ATLAS) == 114_688  # 35 GiB / 320 KiB


def test_40_sequences_of_2800_tokens_fill_97_percent():
    assert round(b.kv_occupancy(ATLAS, 40, 2800), 2) == 0.98
    assert int(b.kv_occupancy(ATLAS, 40, 2800) * 100) == 97


def test_a_2000_token_prompt_costs_70_ms_and_crosses_four_512_token_steps():
    assert b.prefill_cost_ms(ATLAS, 2000) == pytest.approx(70.0)
    assert b.prefill_steps(ATLAS, 2000) == 4


def test_a_512_token_chunk_costs_18_ms_and_the_step_ceiling_is_63_ms():
    assert round(b.chunk_cost_ms(ATLAS)) == 18
    assert round(b.mixed_step_ceiling_ms(ATLAS)) == 63


def test_walkthrough_3_numbers():
    assert b.chunk_cost_ms(ATLAS, 1024) == pytest.approx(35.84)  # "36 ms"
    assert round(b.mixed_step_ceiling_ms(ATLAS, 1024)) == 81  # "approximately 81 ms"
    assert round(b.chunk_cost_ms(ATLAS, 4096)) == 143  # the oversized priority chunk
    assert b.prefill_cost_ms(ATLAS, 16_000) == pytest.approx(560.0)  # unchunked long prompt


def test_max_num_seqs_keeps_occupancy_under_the_target():
    seqs = b.max_num_seqs_for_occupancy(ATLAS, 2800, 0.8)
    assert seqs == 32
    assert b.kv_occupancy(ATLAS, seqs, 2800) < 0.8 <= b.kv_occupancy(ATLAS, seqs + 1, 2800)
    assert b.kv_occupancy(ATLAS, 28, 2800) < 0.8  # the playbook's more cautious choice


def test_the_largest_chunk_that_fits_the_itl_ceiling():
    chunk = b.max_chunk_for_itl(ATLAS)
    assert b.mixed_step_ceiling_ms(ATLAS, chunk) <= ATLAS.itl_ceiling_ms
    assert b.mixed_step_ceiling_ms(ATLAS, chunk + 256) > ATLAS.itl_ceiling_ms


def test_weights_and_memory_margin_per_rank():
    assert b.weights_per_rank_gb(ATLAS) == 35.0
    # 80 GiB device - 32.6 GiB weights shard - 35 GiB KV - 5 GiB activations = ~7.4 GiB
    assert b.memory_margin_gib(ATLAS, activations_gib=5.0) == pytest.approx(7.40, abs=0.01)
    assert b.memory_margin_gib(ATLAS, activations_gib=5.0, graph_pool_gib=8.0) < 0


@given(
    avg=st.floats(1, 200_000, allow_nan=False),
    target=st.floats(0.05, 1.0, allow_nan=False),
)
def test_max_num_seqs_never_exceeds_the_target(avg, target):
    seqs = b.max_num_seqs_for_occupancy(ATLAS, avg, target)
    assert seqs >= 1
    if seqs > 1:
        assert b.kv_occupancy(ATLAS, seqs, avg) < target


def test_bad_constants_are_refused():
    with pytest.raises(ValueError):
        b.Budget(tp_size=0)
    with pytest.raises(ValueError):
        b.max_num_seqs_for_occupancy(ATLAS, 0)


@pytest.mark.django_db
def test_a_deployment_row_carries_the_atlas_budget_by_default(deployment):
    assert b.Budget.of(deployment) == ATLAS
