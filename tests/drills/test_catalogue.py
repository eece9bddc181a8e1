"""The drill catalogue agrees with the simulator's scenarios and the shipped playbooks."""

from __future__ import annotations

import pytest

from deployments.models import Deployment
from drills import catalogue
from enginesim import scenarios
from investigations.playbook import playbooks


@pytest.mark.parametrize("name", sorted(catalogue.CASES))
def test_each_drill_scenario_exists_and_its_causes_are_branches_of_its_symptom(name):
    case = catalogue.CASES[name]
    tree_causes = set(playbooks()[case.symptom].causes())
    causes = set(scenarios.get(name).causes)
    assert causes and causes <= tree_causes
    for field in case.budget:
        Deployment._meta.get_field(field)  # a real budget constant


def test_scenarios_a_range_cannot_show_are_not_drills():
    assert "healthy" not in catalogue.CASES
    assert "router-slow" not in catalogue.CASES  # needs Prometheus in front of the router


def test_random_is_seeded_and_reaches_several_scenarios():
    assert catalogue.pick("random", 7) == catalogue.pick("random", 7)
    drawn = {catalogue.pick("random", seed) for seed in range(40)}
    assert drawn <= set(catalogue.CASES) and len(drawn) > 3


def test_named_scenarios_and_pairs_are_accepted_and_anything_else_refused():
    assert catalogue.pick("gc-pauses", 1) == "gc-pauses"
    pair = catalogue.case_for("kv-block-leak+kv-pressure")
    assert pair.symptom == "high-ttft" and pair.budget == {"max_num_batched_tokens": 2048}
    for bad in ("router-slow", "healthy", "gc-pauses+gc-pauses", "a+b+c", "", "x" * 5000):
        with pytest.raises(catalogue.UnknownScenario):
            catalogue.pick(bad, 1)
