"""Plans are seeded, bounded and Poisson; traces round-trip and refuse hostile input."""

from __future__ import annotations

import itertools
import statistics

import pytest

from loadgen.plan import (
    MAX_TRACE_BYTES,
    MAX_TRACE_LINE,
    LengthMix,
    PlanError,
    dump_trace,
    load_trace,
    parse_priorities,
    poisson_plan,
    prompt_ids,
)

MIX = LengthMix.parse("0.8:64-128,0.2:900")


def test_same_seed_same_plan_other_seed_other_plan():
    a = poisson_plan(5.0, prompt=MIX, output=LengthMix.fixed(32), seed=3, count=200)
    b = poisson_plan(5.0, prompt=MIX, output=LengthMix.fixed(32), seed=3, count=200)
    c = poisson_plan(5.0, prompt=MIX, output=LengthMix.fixed(32), seed=4, count=200)
    assert a == b
    assert a != c


def test_arrivals_are_poisson_at_the_rate():
    plan = poisson_plan(4.0, prompt=MIX, output=MIX, seed=11, count=20_000)
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(plan)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(0.25, rel=0.03)
    # Exponential gaps: standard deviation equals the mean (a fixed-rate ticker has 0).
    assert statistics.pstdev(gaps) == pytest.approx(mean, rel=0.05)
    assert all(g > 0 for g in gaps)


def test_duration_and_count_bound_the_plan():
    by_time = poisson_plan(10.0, prompt=MIX, output=MIX, seed=1, duration_s=30)
    assert by_time[-1].at_s <= 30 < by_time[-1].at_s + 2
    assert len(poisson_plan(10.0, prompt=MIX, output=MIX, seed=1, count=7, duration_s=30)) == 7
    with pytest.raises(PlanError, match="bounded"):
        poisson_plan(10.0, prompt=MIX, output=MIX)
    with pytest.raises(PlanError):
        poisson_plan(0.0, prompt=MIX, output=MIX, count=3)
    with pytest.raises(PlanError):
        poisson_plan(float("inf"), prompt=MIX, output=MIX, count=3)


def test_mixture_weights_and_ranges():
    plan = poisson_plan(1.0, prompt=MIX, output=LengthMix.fixed(5), seed=2, count=5000)
    long = sum(1 for r in plan if r.prompt_tokens == 900)
    assert long / len(plan) == pytest.approx(0.2, abs=0.02)
    assert all(64 <= r.prompt_tokens <= 128 or r.prompt_tokens == 900 for r in plan)
    assert {r.max_tokens for r in plan} == {5}
    assert MIX.mean() == pytest.approx(0.8 * 96 + 0.2 * 900)


def test_priorities_follow_their_weights():
    plan = poisson_plan(
        1.0, prompt=MIX, output=MIX, seed=5, count=4000,
        priorities=parse_priorities("0.75:0,0.25:-1"),
    )  # fmt: skip
    urgent = sum(1 for r in plan if r.priority == -1)
    assert urgent / len(plan) == pytest.approx(0.25, abs=0.03)


@pytest.mark.parametrize("text", ["", "0:10", "1:0-5", "1:9-3", "x:1-2", "1:a", "-1:4"])
def test_bad_mixtures_are_refused(text):
    with pytest.raises(PlanError):
        LengthMix.parse(text)


def test_trace_round_trips_and_is_sorted():
    plan = poisson_plan(3.0, prompt=MIX, output=MIX, seed=9, count=50,
                        priorities=((1, 0), (1, 2)))  # fmt: skip
    again = load_trace(dump_trace(plan))
    assert [(r.prompt_tokens, r.max_tokens, r.priority) for r in again] == [
        (r.prompt_tokens, r.max_tokens, r.priority) for r in plan
    ]
    assert [r.at_s for r in again] == pytest.approx([r.at_s for r in plan], abs=1e-6)
    shuffled = load_trace(
        '{"at_s": 2, "prompt_tokens": 5, "max_tokens": 1}\n'
        '# comment\n\n{"at_s": 1, "prompt_tokens": 9, "max_tokens": 2}\n'
    )
    assert [r.prompt_tokens for r in shuffled] == [9, 5]
    assert [r.seq for r in shuffled] == [0, 1]


@pytest.mark.parametrize(
    "text",
    [
        "not json\n",
        "[1, 2]\n",
        '{"at_s": -1, "prompt_tokens": 5, "max_tokens": 1}\n',
        '{"at_s": "NaN", "prompt_tokens": 5, "max_tokens": 1}\n',
        '{"at_s": 1, "prompt_tokens": 0, "max_tokens": 1}\n',
        '{"at_s": 1, "prompt_tokens": 99999999999, "max_tokens": 1}\n',
        '{"at_s": 1, "max_tokens": 1}\n',
        '{"at_s": 1, "prompt_tokens": 5, "max_tokens": 1}\x00\n',
        '{"at_s": 1, "prompt_tokens": 5, "max_tokens": 1, "pad": "' + "x" * MAX_TRACE_LINE + '"}',
        " " * (MAX_TRACE_BYTES + 1),
    ],
)
def test_hostile_traces_are_refused(text):
    with pytest.raises(PlanError):
        load_trace(text)


def test_prompt_ids_are_distinct_per_request_and_within_the_vocabulary():
    a = prompt_ids(0, 1, 200, 4096)
    assert a == prompt_ids(0, 1, 200, 4096)
    assert a != prompt_ids(0, 2, 200, 4096)
    assert len(a) == 200
    assert all(3 <= t < 4096 for t in a)


def test_merged_classes_keep_their_shapes_in_arrival_order():
    from loadgen.plan import merge

    decode = poisson_plan(2.0, prompt=LengthMix.fixed(40), output=LengthMix.fixed(300),
                          seed=1, duration_s=20)  # fmt: skip
    prefill = poisson_plan(1.0, prompt=LengthMix.fixed(1800), output=LengthMix.fixed(4),
                           seed=2, duration_s=20)  # fmt: skip
    both = merge(decode, prefill)
    assert len(both) == len(decode) + len(prefill)
    assert [r.seq for r in both] == list(range(len(both)))
    assert all(a.at_s <= b.at_s for a, b in itertools.pairwise(both))
    shapes = {(r.prompt_tokens, r.max_tokens) for r in both}
    assert shapes == {(40, 300), (1800, 4)}
