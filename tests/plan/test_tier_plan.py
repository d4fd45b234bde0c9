"""fleetcast plan over price-tier mixes (``plan.grid={fleet.tiers: [...]}``): the same fleet
size for each mix, ranked by its bill, worked out by hand.

The fleet: every step takes 10 ms (``step_time=constant``), one request a step
(``max_num_seqs: 1``), one-token outputs: a replica serves 100 requests/s. At 250 requests/s
evenly spaced (``workload=constant``) two replicas fall behind and three keep up, whatever the
mix: both mixes need 3 replicas. ``{on_demand: rest}`` costs 3 x $2.99 = $8.97/hour;
``{reserved: 2, on_demand: rest}`` 2 x $2.10 + $2.99 = $7.19/hour (the default price list), so
the plan ranks it first.
"""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.plan.answer import ranked_table
from sim.plan.candidates import candidates, fewest_replicas
from sim.plan.planner import run_plan
from tests.support import NO_WHATIFS, compose

FLEET = (
    "step_time=constant",
    "step_time.seconds=0.01",
    "scheduler.max_num_seqs=1",
    "workload=constant",
    "workload.qps=250",
    "workload.num_requests=500",
    "workload.prompt_tokens=16",
    "workload.output_tokens=1",
)
MIXES = "plan.grid={fleet.tiers: [{on_demand: rest}, {reserved: 2, on_demand: rest}]}"


def test_a_plan_over_two_mixes_ranks_the_cheaper_first(tmp_path):
    _, plan_json = run_plan(
        [
            *FLEET,
            MIXES,
            "plan.slo=[ttft_s.p99 <= 0.05]",
            "plan.max_replicas=4",
            "plan.min_replications=2",
            "plan.max_replications=2",
            *NO_WHATIFS,
            "plan.jobs=2",
            f"plan.output_dir={tmp_path}",
        ],
        progress=False,
    )
    answers = {c["overrides"][0]: c for c in plan_json["candidates"]}
    on_demand = answers["fleet.tiers={on_demand: rest}"]
    mixed = answers["fleet.tiers={reserved: 2, on_demand: rest}"]
    assert on_demand["replicas"] == mixed["replicas"] == 3
    # two replicas fall behind; the mix's search starts at the 2 replicas it reserves
    assert (2, "misses") in [(p["replicas"], p["decision"]) for p in on_demand["evaluated"]]
    assert [(p["replicas"], p["decision"]) for p in mixed["evaluated"]] == [
        (2, "misses"),
        (3, "meets"),
    ]
    assert on_demand["usd_per_hour"] == pytest.approx(3 * 2.99)
    assert mixed["usd_per_hour"] == pytest.approx(2 * 2.10 + 2.99)
    table = ranked_table(plan_json).splitlines()
    assert table[1].startswith("  1. fleet.tiers={reserved: 2, on_demand: rest}: 3 replica(s)")
    assert table[2].startswith("  2. fleet.tiers={on_demand: rest}: 3 replica(s)")


def test_a_mix_is_searched_from_the_replicas_it_fixes():
    assert candidates({"fleet.tiers": [{"reserved": 2, "on_demand": "rest"}]}) == [
        ["fleet.tiers={reserved: 2, on_demand: rest}"]
    ]
    assert fewest_replicas(compose("fleet.tiers={reserved: 2, spot: 1, on_demand: rest}")) == 3
    assert fewest_replicas(compose("fleet.tiers={on_demand: rest}")) == 1
    disaggregated = compose(
        "placement=disaggregated",
        "placement.prefill.replicas=2",
        "placement.decode.tiers={reserved: 3, spot: rest}",
    )
    assert fewest_replicas(disaggregated) == 2 + 3
    with pytest.raises(ConfigError, match="let one tier be 'rest'") as err:
        fewest_replicas(compose("fleet.replicas=3", "fleet.tiers={reserved: 3}"))
    assert err.value.field == "fleet.tiers"
