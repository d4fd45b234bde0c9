"""Fleets bought at price tiers (``sim.deploy.tiers``): each replica billed at its tier's price,
worked out by hand; the pools of a disaggregated fleet; the one-line refusals; and a fleet
without tiers billed as before.

The hand case: 4 replicas of TP 2 (8 H100s) bought as ``{reserved: 1, spot: 2, on_demand:
rest}`` at $2 (reserved), $1 (spot) and $3 (on demand) a GPU-hour: 1 x 2 x $2 + 2 x 2 x $1 +
1 x 2 x $3 = $14 an hour, $1.75 a GPU-hour on average; over a span of H hours the run costs
$14 H.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from sim.errors import ConfigError
from sim.run import simulate
from tests.contract import table_problems
from tests.support import compose

PRICES = (
    "cost.prices.H100-SXM.on_demand=3",
    "cost.prices.H100-SXM.reserved=2",
    "cost.prices.H100-SXM.spot=1",
)
RUN = ("workload=poisson", "workload.num_requests=40", "workload.qps=20", "sim.progress=false")


def _summary(*overrides: str) -> dict:
    result = simulate(compose(*RUN, *overrides))
    assert table_problems(result.requests, result.steps, result.summary) == []
    return result.summary


def test_a_mixed_fleet_is_billed_replica_by_replica_at_its_tiers_prices():
    result = simulate(
        compose(
            *RUN,
            *PRICES,
            "fleet.replicas=4",
            "fleet.tp=2",
            "fleet.tiers={reserved: 1, spot: 2, on_demand: rest}",
        )
    )
    s, cost = result.summary, result.summary["cost"]
    assert table_problems(result.requests, result.steps, s) == []
    assert s["num_gpus"] == 8 and s["num_replicas"] == 4
    assert cost["usd_per_hour"] == 14.0 and cost["usd_per_gpu_hour"] == 1.75
    assert cost["tier"] == "mixed" and cost["price_source"] == "fleet.tiers"
    assert cost["per_tier"] == {
        "reserved": {"replicas": 1, "gpus": 2, "usd_per_gpu_hour": 2.0, "usd_per_hour": 4.0},
        "spot": {"replicas": 2, "gpus": 4, "usd_per_gpu_hour": 1.0, "usd_per_hour": 4.0},
        "on_demand": {"replicas": 1, "gpus": 2, "usd_per_gpu_hour": 3.0, "usd_per_hour": 6.0},
    }
    # replicas x GPUs x hours x price, summed over the tiers, is what the output tokens pay
    hours = s["duration_s"] / 3600
    bill = (1 * 2 * 2.0 + 2 * 2 * 1.0 + 1 * 2 * 3.0) * hours
    done = pc.equal(result.requests.column("status"), "completed")
    out_tokens = pc.sum(pc.filter(result.requests.column("output_tokens"), done)).as_py()
    assert cost["usd_per_million_output_tokens"] == pytest.approx(bill / out_tokens * 1e6)


def test_one_tier_names_it_and_on_demand_alone_bills_as_the_default_run():
    default = _summary()
    on_demand = _summary("fleet.tiers={on_demand: rest}")
    # the same run (price tiers change only the bill) at the same price
    assert {k: v for k, v in on_demand.items() if k != "cost"} == {
        k: v for k, v in default.items() if k != "cost"
    }
    plain = {k: v for k, v in default["cost"].items() if k not in ("tier", "price_source")}
    assert {k: on_demand["cost"][k] for k in plain} == plain
    assert on_demand["cost"]["tier"] == "on_demand"
    assert on_demand["cost"]["per_tier"] == {
        "on_demand": {"replicas": 4, "gpus": 4, "usd_per_gpu_hour": 2.99, "usd_per_hour": 4 * 2.99}
    }
    # a run without tiers has no per_tier key: its summary is as before price tiers
    assert "per_tier" not in default["cost"] and default["cost"]["tier"] is None


def test_the_pools_of_a_disaggregated_fleet_each_have_their_mix():
    s = _summary(
        *PRICES,
        "placement=disaggregated",
        "fleet.replicas=4",
        "placement.prefill.tiers={spot: 1}",
        "placement.decode.tiers={reserved: 2, on_demand: rest}",
    )
    pools, cost = s["disaggregation"], s["cost"]
    # prefill: 1 spot at $1; decode: 2 reserved at $2 and 1 on demand at $3
    assert pools["prefill"]["usd_per_hour"] == 1.0 and pools["prefill"]["usd_per_gpu_hour"] == 1.0
    assert pools["decode"]["usd_per_hour"] == 7.0
    assert pools["decode"]["usd_per_gpu_hour"] == pytest.approx(7.0 / 3)
    assert cost["usd_per_hour"] == 8.0 and cost["tier"] == "mixed"
    assert cost["price_source"] == "placement.prefill.tiers, placement.decode.tiers"
    assert {t: row["replicas"] for t, row in cost["per_tier"].items()} == {
        "spot": 1,
        "reserved": 2,
        "on_demand": 1,
    }


def test_a_pool_without_a_mix_beside_one_with_is_bought_on_demand():
    s = _summary(*PRICES, "placement=disaggregated", "placement.prefill.tiers={spot: 1}")
    assert s["cost"]["per_tier"]["on_demand"]["replicas"] == 3
    assert s["cost"]["usd_per_hour"] == 1.0 + 3 * 3.0


@pytest.mark.parametrize(
    "overrides, field, reason",
    [
        (
            ["fleet.tiers={reserved_3y: 1, on_demand: rest}"],
            "fleet.tiers",
            "has no reserved_3y price for H100-SXM",
        ),
        (
            ["cost=gcp", "hardware=a100_80g", "fleet.tiers={reserved: 1, on_demand: rest}"],
            "fleet.tiers",
            "has no reserved price for A100-80G-SXM",
        ),
        (["fleet.tiers={spot: 3}"], "fleet.tiers", "counts 3 replicas, not the 4 there are"),
        (["fleet.tiers={spotty: 4}"], "fleet.tiers", "unknown tier 'spotty'"),
        (["cost.tier=spot", "fleet.tiers={spot: 4}"], "cost.tier", "prices the whole fleet"),
        (["cost.usd_per_gpu_hour=2", "fleet.tiers={spot: 4}"], "cost.usd_per_gpu_hour", "alike"),
        (
            ["autoscale.policy=utilization", "fleet.tiers={spot: 4}"],
            "fleet.tiers",
            "not modelled for an autoscaled fleet",
        ),
        (
            ["placement=disaggregated", "fleet.tiers={spot: 4}"],
            "fleet.tiers",
            "give placement.prefill.tiers and placement.decode.tiers",
        ),
        (
            ["placement=disaggregated", "placement.decode.tiers={spot: 2}"],
            "placement.decode.tiers",
            "counts 2 replicas, not the 3 there are",
        ),
    ],
)
def test_a_mix_the_run_cannot_bill_is_refused_before_it_runs(overrides, field, reason):
    with pytest.raises(ConfigError) as err:
        simulate(compose(*RUN, *overrides))
    assert err.value.field == field and reason in str(err.value)
    assert "\n" not in str(err.value)
