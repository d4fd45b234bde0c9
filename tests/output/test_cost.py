"""The cost model (sim/output/cost.py): arithmetic by hand, price precedence, validation, one run.

The hand case: 2 GPUs at $3/GPU-hour over a 3600 s span, 1,800 completed requests with 900,000
prompt and 360,000 output tokens, 1,500 of them within the SLO.
"""

import dataclasses
import math

import numpy as np
import pyarrow.compute as pc
import pytest
from omegaconf import OmegaConf

from sim.catalog.hardware import GPU
from sim.errors import ConfigError
from sim.output.cost import (
    TIERS,
    CostConfig,
    fleet_cost,
    gpu_price,
    split_by_pool,
    tier_price,
)
from sim.resources import config_dir
from sim.run import simulate
from tests.support import compose, option

DEFAULT_COST = option("cost", "default")
HARDWARE = {
    p.stem: option("hardware", p.stem) for p in sorted((config_dir() / "hardware").glob("*.yaml"))
}
H100 = GPU.from_config(HARDWARE["h100_sxm"])
# A GPU the price table does not list, at $3/GPU-hour and a 700 W TDP.
TEST_GPU = dataclasses.replace(H100, name="TEST-GPU", usd_per_gpu_hour=3.0, power_w=700.0)
HAND = {
    "num_gpus": 2,
    "duration_s": 3600.0,
    "completed_requests": 1800,
    "good_requests": 1500,
    "input_tokens": 900_000.0,
    "output_tokens": 360_000.0,
    "gpu_busy_fraction": 0.5,
}


def cost_config(**changes) -> CostConfig:
    """The default cost config with nested changes, e.g. ``energy={"enabled": True}``."""
    cfg = OmegaConf.merge(OmegaConf.create(DEFAULT_COST), OmegaConf.create(changes))
    return CostConfig.from_config(OmegaConf.to_container(cfg))


def test_hand_case():
    cost = fleet_cost(cost_config(), TEST_GPU, **HAND)
    assert cost["usd_per_gpu_hour"] == 3.0
    assert cost["usd_per_hour"] == 6.0
    # 360,000 tokens / 3600 s = 100 tok/s = 360,000 tok/hour: $6 / 0.36 M = $16.67
    assert cost["usd_per_million_output_tokens"] == pytest.approx(50 / 3, rel=1e-12)
    # 900,000 tokens an hour: $6 / 0.9 M = $6.67
    assert cost["usd_per_million_input_tokens"] == pytest.approx(20 / 3, rel=1e-12)
    # 1,500 good requests an hour: $6 / 1.5 thousand = $4
    assert cost["usd_per_thousand_good_requests"] == pytest.approx(4.0, rel=1e-12)
    assert cost["gpu_hours_per_day"] is None  # no traffic level set
    assert cost["energy"] is None
    assert cost["usd_per_hour_with_energy"] == 6.0
    assert cost["tier"] is None and cost["price_source"] == "hardware.usd_per_gpu_hour"


def test_gpu_hours_per_day_by_hand():
    # 86,400 requests a day is 1 req/s; the run served 1,800 / 3600 s = 0.5 req/s on 2 GPUs,
    # so the traffic needs 4 GPUs around the clock: 96 GPU-hours a day.
    cost = fleet_cost(cost_config(requests_per_day=86_400), TEST_GPU, **HAND)
    assert cost["gpu_hours_per_day"] == pytest.approx(96.0, rel=1e-12)


def test_energy_by_hand():
    cost = fleet_cost(
        cost_config(
            energy={"enabled": True, "usd_per_kwh": 0.12, "idle_power_fraction": 0.3, "pue": 1.3}
        ),
        TEST_GPU,
        **HAND,
    )
    energy = cost["energy"]
    # half busy: 0.3 * 700 W idle share + 0.7 * 700 W * 0.5 busy share = 455 W
    assert energy["kw_per_gpu"] == pytest.approx(0.455, rel=1e-12)
    # 2 GPUs x 0.455 kW x PUE 1.3 = 1.183 kWh per hour, x $0.12 = $0.14196
    assert energy["kwh_per_hour"] == pytest.approx(1.183, rel=1e-12)
    assert energy["usd_per_hour"] == pytest.approx(0.14196, rel=1e-12)
    assert cost["usd_per_hour_with_energy"] == pytest.approx(6.14196, rel=1e-12)
    # energy is beside the rental bill, not in the per-token figures
    assert cost["usd_per_hour"] == 6.0
    assert cost["usd_per_million_output_tokens"] == pytest.approx(50 / 3, rel=1e-12)


@pytest.mark.parametrize("busy, watts", [(0.0, 210.0), (1.0, 700.0), (None, 210.0)])
def test_energy_idle_and_busy_ends(busy, watts):
    cost = fleet_cost(
        cost_config(energy={"enabled": True}), TEST_GPU, **{**HAND, "gpu_busy_fraction": busy}
    )
    assert cost["energy"]["kw_per_gpu"] * 1000 == pytest.approx(watts, rel=1e-12)


def test_zero_denominators_give_none():
    empty = fleet_cost(
        cost_config(requests_per_day=1000),
        TEST_GPU,
        **{
            **HAND,
            "duration_s": 0.0,
            "completed_requests": 0,
            "good_requests": 0,
            "input_tokens": 0.0,
            "output_tokens": 0.0,
        },
    )
    for key in (
        "usd_per_million_output_tokens",
        "usd_per_million_input_tokens",
        "usd_per_thousand_good_requests",
        "gpu_hours_per_day",
    ):
        assert empty[key] is None, key
    assert empty["usd_per_hour"] == 6.0  # the fleet is paid for either way
    no_good = fleet_cost(cost_config(), TEST_GPU, **{**HAND, "good_requests": 0})
    assert no_good["usd_per_thousand_good_requests"] is None
    assert no_good["usd_per_million_output_tokens"] is not None


def test_a_disaggregated_bill_split_by_pool_adds_up_to_the_bill():
    # $36/hour of prefill over 3,600 prompt tokens/s, $144/hour of decode over 400 output
    per_input, per_output = split_by_pool(36.0, 144.0, 3600.0, 400.0)
    assert per_input == pytest.approx(36.0 / 3600 * 1e6 / 3600)  # $2.78 per million
    assert per_output == pytest.approx(100.0)
    # each token kind at its price pays the whole bill, $180/hour, and nothing twice
    assert 3600.0 * per_input + 400.0 * per_output == pytest.approx(180.0 / 3600 * 1e6)
    assert split_by_pool(36.0, 144.0, 0.0, None) == (None, None)  # no tokens: no figure


def test_tiers_order_for_every_listed_gpu():
    table = cost_config().prices
    for name, listed in table.items():
        # the tiers a GPU lists (some list on-demand only) are ordered spot < reserved < on-demand
        prices = [p for p in (listed.spot, listed.reserved, listed.on_demand) if p is not None]
        assert prices and all(a < b for a, b in zip(prices, prices[1:], strict=False)), name
    for tier in TIERS:
        if getattr(table["H100-SXM"], tier) is None:  # (reserved_3y: no default price)
            continue
        price, used_tier, source = gpu_price(cost_config(tier=tier), H100)
        assert price == getattr(table["H100-SXM"], tier)
        assert used_tier == tier and source == f"cost.prices.H100-SXM.{tier}"


def test_the_gcp_price_list_is_one_providers_four_tiers_each_below_on_demand():
    """``cost=gcp``: every listed GPU has a dated source, commitments and spot cost less than
    on demand, the longer commitment less than the shorter, and a tier the catalog does not
    give is absent, never filled in (A100 80GB: no committed-use price)."""
    gcp = CostConfig.model_validate(option("cost", "gcp")).prices
    assert set(gcp) == {"H100-SXM", "A100-40G-SXM", "A100-80G-SXM"}
    for name, listed in gcp.items():
        assert listed.source and listed.date == "2025-03-06", name
        assert listed.spot is not None and listed.spot < listed.on_demand, name
        if listed.reserved is not None:
            assert listed.reserved_3y < listed.reserved < listed.on_demand, name
    assert gcp["A100-80G-SXM"].reserved is None and gcp["A100-80G-SXM"].reserved_3y is None
    # the per-GPU figure of an 8-GPU machine: a3-highgpu-8g at $88.49/hour
    assert gcp["H100-SXM"].on_demand == pytest.approx(88.49 / 8, abs=1e-4)


def test_a_tier_price_comes_from_the_list_and_is_never_made_up():
    gcp = CostConfig.model_validate(option("cost", "gcp"))
    assert tier_price(gcp, H100, "reserved_3y", "fleet.tiers") == (
        4.858,
        "cost.prices.H100-SXM.reserved_3y",
    )
    # on demand of a GPU the list does not give: the catalog's own, on-demand, price
    assert tier_price(gcp, TEST_GPU, "on_demand", "fleet.tiers") == (
        3.0,
        "hardware.usd_per_gpu_hour",
    )
    with pytest.raises(ConfigError, match="has no spot price for TEST-GPU") as err:
        tier_price(gcp, TEST_GPU, "spot", "placement.decode.tiers")
    assert err.value.field == "placement.decode.tiers"


def test_price_table_covers_the_catalog():
    """Every catalog GPU is listed, with a source and a date, and its on-demand price is the
    hardware file's, so the default (tier null) and tier=on_demand agree."""
    table = cost_config().prices
    for stem, hw in HARDWARE.items():
        if stem == "custom":  # every figure of hardware=custom is the user's, the price too
            continue
        listed = table[hw["name"]]
        assert listed.on_demand == hw["usd_per_gpu_hour"], stem
        assert listed.source and listed.date, stem


def test_price_precedence():
    # 1. an explicit price beats the tier and the catalog
    assert gpu_price(cost_config(tier="spot", usd_per_gpu_hour=2.2), H100) == (
        2.2,
        None,
        "cost.usd_per_gpu_hour",
    )
    # 2. a tier picks the table's price for this GPU
    assert gpu_price(cost_config(tier="spot"), H100)[0] == 1.75
    # the table is overridable entry by entry
    assert gpu_price(cost_config(tier="spot", prices={"H100-SXM": {"spot": 1.1}}), H100)[0] == 1.1
    # 3. no tier: the hardware's own price (the catalog's, or a hardware.usd_per_gpu_hour override)
    assert gpu_price(cost_config(), dataclasses.replace(H100, usd_per_gpu_hour=2.5)) == (
        2.5,
        None,
        "hardware.usd_per_gpu_hour",
    )
    # a GPU missing from the table, or a tier missing for it, falls back to the hardware price
    assert gpu_price(cost_config(tier="spot"), TEST_GPU) == (3.0, None, "hardware.usd_per_gpu_hour")
    assert gpu_price(cost_config(tier="spot", prices={"H100-SXM": {"spot": None}}), H100)[0] == 2.99


def test_hardware_price_override_still_works_end_to_end():
    s = simulate(
        compose(
            "workload=poisson",
            "workload.num_requests=20",
            "workload.qps=10",
            "fleet.replicas=2",
            "hardware.usd_per_gpu_hour=2.5",
            "sim.progress=false",
        )
    ).summary
    assert s["cost"]["usd_per_gpu_hour"] == 2.5 and s["cost"]["usd_per_hour"] == 5.0


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"tier": "bogus"}, "cost.tier"),
        ({"usd_per_gpu_hour": -1}, "cost.usd_per_gpu_hour"),
        ({"prices": {"H100-SXM": {"spot": -0.5}}}, "cost.prices.H100-SXM.spot"),
        ({"prices": {"H100-SXM": {"preemptible": 1.0}}}, "cost.prices.H100-SXM.preemptible"),
        ({"requests_per_day": 0}, "cost.requests_per_day"),
        ({"energy": {"pue": 0.5}}, "cost.energy.pue"),
        ({"energy": {"idle_power_fraction": 1.5}}, "cost.energy.idle_power_fraction"),
        ({"energy": {"usd_per_kwh": -0.1}}, "cost.energy.usd_per_kwh"),
        ({"energy": {"enabled": "yes"}}, "cost.energy.enabled"),
        ({"currency": "EUR"}, "cost.currency"),
    ],
)
def test_bad_input_names_the_field(changes, field):
    with pytest.raises(ConfigError) as err:
        cost_config(**changes)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_bad_input_fails_before_the_run():
    cfg = compose("workload=poisson", "workload.num_requests=20", "cost.energy.pue=0.5")
    with pytest.raises(ConfigError, match=r"cost\.energy\.pue"):
        simulate(cfg)


def test_config_without_cost_block_uses_the_catalog_price():
    cfg = compose(
        "workload=poisson", "workload.num_requests=20", "fleet.replicas=1", "sim.progress=false"
    )
    del cfg["cost"]  # a config written before the cost model existed
    cost = simulate(cfg).summary["cost"]
    assert cost["usd_per_gpu_hour"] == H100.usd_per_gpu_hour
    assert cost["price_source"] == "hardware.usd_per_gpu_hour" and cost["energy"] is None


def test_simulated_cost_block_matches_the_run():
    result = simulate(
        compose(
            "workload=poisson",
            "workload.num_requests=50",
            "workload.qps=10",
            "fleet.replicas=1",
            "cost.tier=spot",
            "cost.energy.enabled=true",
            "cost.requests_per_day=100000",
            "sim.progress=false",
        )
    )
    s, cost = result.summary, result.summary["cost"]
    done = np.asarray(pc.equal(result.requests.column("status"), "completed"))
    out_tokens = np.asarray(result.requests.column("output_tokens"))[done].sum()
    in_tokens = np.asarray(result.requests.column("prompt_tokens"))[done].sum()
    hours = s["duration_s"] / 3600
    assert cost["tier"] == "spot" and cost["price_source"] == "cost.prices.H100-SXM.spot"
    assert cost["usd_per_gpu_hour"] == DEFAULT_COST["prices"]["H100-SXM"]["spot"]
    assert cost["usd_per_hour"] == s["num_gpus"] * cost["usd_per_gpu_hour"]
    bill = cost["usd_per_hour"] * hours  # what the simulated span cost
    assert cost["usd_per_million_output_tokens"] == pytest.approx(bill / out_tokens * 1e6)
    assert cost["usd_per_million_input_tokens"] == pytest.approx(bill / in_tokens * 1e6)
    good = s["goodput_requests_per_s"] * s["duration_s"]
    assert cost["usd_per_thousand_good_requests"] == pytest.approx(bill / good * 1e3)
    rps = s["throughput"]["requests_per_s"]
    assert cost["gpu_hours_per_day"] == pytest.approx(s["num_gpus"] * 100_000 / 3600 / rps)
    energy = DEFAULT_COST["energy"]
    idle = energy["idle_power_fraction"]
    busy = min(s["gpu_busy_fraction"], 1.0)
    kw = H100.power_w / 1000 * (idle + (1 - idle) * busy)
    assert cost["energy"]["kw_per_gpu"] == pytest.approx(kw)
    assert cost["energy"]["kwh_per_hour"] == pytest.approx(kw * s["num_gpus"] * energy["pue"])
    assert cost["usd_per_hour_with_energy"] == pytest.approx(
        cost["usd_per_hour"] + cost["energy"]["kwh_per_hour"] * energy["usd_per_kwh"]
    )
    assert all(math.isfinite(v) for v in cost.values() if isinstance(v, float))
