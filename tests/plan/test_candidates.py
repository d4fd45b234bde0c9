"""A plan's candidates: the grid's combinations, the limit on how many, and each checked and
composed once per kind before any simulation runs (sim.plan.candidates)."""

from __future__ import annotations

import pytest

from sim.config.compose import compose_config
from sim.errors import ConfigError
from sim.plan.candidates import (
    MAX_CANDIDATES,
    checked_fewest,
    composition_kind,
    every_candidate,
)
from sim.plan.planner import prepare

BASE = ["workload=poisson", "workload.num_requests=5"]


def test_a_grid_past_the_limit_is_one_line_before_any_candidate_is_made():
    grid = {"scheduler.max_num_seqs": list(range(1, 101)), "workload.qps": list(range(1, 101))}
    with pytest.raises(ConfigError) as err:
        prepare([*BASE, f"plan.grid={grid}"])
    assert str(err.value) == (
        "plan.grid='100 scheduler.max_num_seqs x 100 workload.qps': gives 10,000 candidates, "
        f"more than the {MAX_CANDIDATES:,} a plan takes: each is a search of its own, at least "
        "plan.min_replications simulations at each count it tries; narrow the grid's lists, or "
        "plan the candidates in parts"
    )


def test_the_limit_counts_the_listed_candidates_too():
    at_limit = {"kv.watermark": [i / 10_000 for i in range(MAX_CANDIDATES)]}
    assert len(every_candidate(at_limit, [])) == MAX_CANDIDATES
    with pytest.raises(ConfigError, match=r"gives 1,001 candidates"):
        every_candidate(at_limit, [["hardware=h200"]])
    assert every_candidate({}, [["hardware=h200"]]) == [["hardware=h200"]]  # no empty one


@pytest.mark.parametrize(
    "override, kind",
    [
        ("scheduler.max_num_seqs=64", "scheduler.max_num_seqs=<value>"),
        ("hardware.usd_per_gpu_hour=3", "hardware.usd_per_gpu_hour=<value>"),
        ("hardware=h200", "hardware=h200"),  # a group's option: its own config
        ("placement.prefill.replicas=2", "placement.prefill.replicas=2"),  # the fleet's shape
        ("scheduler.max_num_seqs=${seed}", "scheduler.max_num_seqs=${seed}"),
        ("workload.prompt_tokens={dist: uniform}", "workload.prompt_tokens={dist: uniform}"),
        ("+sim.extra=1", "+sim.extra=1"),
    ],
)
def test_only_plain_values_compose_alike(override, kind):
    assert composition_kind(override) == kind


def test_candidates_are_composed_once_per_kind_and_each_is_checked():
    composed: list[list[str]] = []

    def compose(overrides: list[str]) -> dict:
        composed.append(overrides)
        return compose_config(overrides)

    each = [
        [f"scheduler.max_num_seqs={n}", f"hardware={hardware}"]
        for n in (8, 16, 32)
        for hardware in ("h100_sxm", "h200")
    ]
    each.append(["placement=disaggregated", "placement.prefill.replicas=2"])
    assert checked_fewest(BASE, each, compose) == [1] * 6 + [3]
    assert len(composed) == 3  # one per GPU, one for the disaggregated fleet
    # every candidate's overrides are still checked, a plain value's key included
    with pytest.raises(ConfigError, match=r"^scheduler\.max_num_seq"):
        checked_fewest(BASE, [*each, ["scheduler.max_num_seq=4"]], compose)
    # an interpolation in the base could read a candidate's value: each is composed
    composed.clear()
    checked_fewest([*BASE, "kv.watermark=${oc.decode:'0.01'}"], each[:3], compose)
    assert len(composed) == 3
