"""The registry of fleet shapes (``sim.deploy.shapes``): the shape each config asks for, and
what each shape adds to a run: its summary blocks, its files, how it is billed."""

from __future__ import annotations

import pytest

from sim.config.schema import validate_run
from sim.deploy.autoscaled import AutoscaledFleet
from sim.deploy.disaggregated import DisaggregatedFleet
from sim.deploy.fixed import FixedFleet
from sim.deploy.shapes import fleet_shape
from sim.errors import ConfigError
from sim.output.run_files import SCALING_FILE
from sim.run import simulate
from tests.scenarios import TINY
from tests.support import compose

PRICE = 3.6  # $/GPU-hour
CONSTANT = ["step_time=constant", "step_time.seconds=0.01", f"cost.usd_per_gpu_hour={PRICE}"]
SCHEDULED = [
    *TINY,
    *CONSTANT,
    "autoscale.policy=schedule",
    "autoscale.provision_s=0.5",
    "autoscale.schedule=[{at_s: 0, replicas: 1}, {at_s: 1, replicas: 2}]",
]
DISAGGREGATED = [*TINY, *CONSTANT, "placement=disaggregated", "fleet.replicas=3"]


def _shape(*overrides: str):
    cfg = compose(*overrides)
    return fleet_shape(cfg, validate_run(cfg))


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [(TINY, FixedFleet), (SCHEDULED, AutoscaledFleet), (DISAGGREGATED, DisaggregatedFleet)],
    ids=["fixed", "autoscaled", "disaggregated"],
)
def test_the_registry_builds_the_shape_the_config_asks_for(overrides, kind):
    assert type(_shape(*overrides)) is kind


def test_a_disaggregated_fleet_refuses_autoscaling_in_its_own_terms():
    with pytest.raises(ConfigError, match=r"^autoscale\.policy='rate': .*disaggregated pools"):
        _shape(*DISAGGREGATED, "autoscale.policy=rate")


def test_a_fixed_fleet_adds_nothing_of_its_own():
    result = simulate(compose(*TINY, *CONSTANT, "fleet.replicas=2"))
    summary = result.summary
    assert "autoscale" not in summary and "disaggregation" not in summary
    assert result.tables == {} and summary["num_gpus"] == 2
    assert summary["cost"]["usd_per_hour"] == pytest.approx(2 * PRICE)


def test_an_autoscaled_fleet_adds_its_engines_and_its_scaling_log():
    result = simulate(compose(*SCHEDULED))
    assert list(result.tables) == [SCALING_FILE] and result.scaling is result.tables[SCALING_FILE]
    block = result.summary["autoscale"]
    assert (
        list(block["engines"]) == ["base"] and block["engines"]["base"]["usd_per_gpu_hour"] == PRICE
    )
    # billed for the GPUs it held: one, then two from 1 s (asked for 0.5 s ahead) on
    assert result.summary["num_gpus"] == 2
    assert PRICE < result.summary["cost"]["usd_per_hour"] < 2 * PRICE


def test_a_disaggregated_fleet_adds_its_pools_each_billed_at_its_own_price():
    shape = _shape(
        *DISAGGREGATED, "placement.decode.hardware=a100_80g", "cost.usd_per_gpu_hour=null"
    )
    groups = shape.replica_groups()
    assert [g.replicas for g in groups] == [1, 2]
    assert groups[0].usd_per_gpu_hour != groups[1].usd_per_gpu_hour
    result = simulate(
        compose(*DISAGGREGATED, "placement.decode.hardware=a100_80g", "cost.usd_per_gpu_hour=null")
    )
    summary = result.summary
    pools = summary["disaggregation"]
    assert [pools[p]["usd_per_hour"] for p in ("prefill", "decode")] == [
        g.usd_per_hour for g in groups
    ]
    assert summary["cost"]["usd_per_hour"] == sum(g.usd_per_hour for g in groups)
    assert summary["cost"]["price_source"].startswith("each pool's GPUs at their own price")
    assert result.tables == {}
