"""Price-tier mixes (``sim.config.tiers``): their names checked in the schema, their counts
resolved against a fleet's size, and what a searched fleet needs (a ``rest`` tier)."""

from __future__ import annotations

import pytest

from sim.config.schema import FleetConfig, PoolConfig
from sim.config.tiers import TIERS, fewest, needs_rest, replica_tiers, resolve
from sim.config.validation import validate
from sim.errors import ConfigError


def test_a_mix_resolves_in_its_order_with_rest_taking_what_is_left():
    mix = {"reserved_3y": 4, "spot": 2, "on_demand": "rest"}
    assert resolve(mix, 9, "fleet.tiers") == {"reserved_3y": 4, "spot": 2, "on_demand": 3}
    # rest may be none; a tier of none is left out
    assert resolve(mix, 6, "fleet.tiers") == {"reserved_3y": 4, "spot": 2}
    assert resolve({"spot": 0, "reserved": 3}, 3, "fleet.tiers") == {"reserved": 3}
    assert fewest(mix) == 6 and fewest({"on_demand": "rest"}) == 0
    counts = resolve(mix, 7, "fleet.tiers")
    assert replica_tiers(counts) == ["reserved_3y"] * 4 + ["spot"] * 2 + ["on_demand"]


@pytest.mark.parametrize(
    "mix, replicas, reason",
    [
        ({"spot": 3}, 4, "counts 3 replicas, not the 4 there are"),
        ({"spot": 2, "reserved": 3}, 4, "counts 5 replicas, not the 4 there are"),
        ({"spot": 5, "on_demand": "rest"}, 4, "asks for 5 replicas besides 'rest'"),
    ],
)
def test_counts_that_do_not_make_the_fleet_are_one_line(mix, replicas, reason):
    with pytest.raises(ConfigError, match=reason) as err:
        resolve(mix, replicas, "placement.decode.tiers")
    assert err.value.field == "placement.decode.tiers" and "\n" not in str(err.value)


@pytest.mark.parametrize("model", [FleetConfig, PoolConfig])
@pytest.mark.parametrize(
    "mix, field, reason",
    [
        (
            {"preemptible": 2},
            "tiers",
            "unknown tier 'preemptible': the tiers are " + ", ".join(TIERS),
        ),
        ({"spot": "rest", "on_demand": "rest"}, "tiers", "only one tier may be 'rest'"),
        ({}, "tiers", "give at least one tier"),
        ({"spot": -1}, "tiers.spot", "must be >= 0"),
        ({"spot": "some"}, "tiers.spot", "must be an integer or rest"),
    ],
)
def test_the_schema_refuses_a_bad_mix_naming_the_known_tiers(model, mix, field, reason):
    with pytest.raises(ConfigError) as err:
        validate(model, {"replicas": 4, "tiers": mix}, "fleet")
    assert err.value.field == f"fleet.{field}" and reason in str(err.value)


def test_a_searched_fleet_needs_a_rest_tier():
    needs_rest(None, "fleet.tiers")  # no mix: nothing to say
    needs_rest({"reserved": 2, "on_demand": "rest"}, "fleet.tiers")
    with pytest.raises(ConfigError, match="let one tier be 'rest'") as err:
        needs_rest({"reserved": 2, "spot": 2}, "fleet.tiers")
    assert err.value.field == "fleet.tiers"
