"""The assumptions table: a policy is named by the config option a user chooses it by, found
again from its class."""

from __future__ import annotations

import pytest
import yaml

from sim.report.assumptions import option_name, price_text
from sim.resources import config_dir


@pytest.mark.parametrize("group", ["scheduler", "router", "step_time"])
def test_every_shipped_option_is_named_back_from_its_target(group):
    files = sorted((config_dir() / group).glob("*.yaml"))
    assert len(files) >= 4
    for path in files:
        target = yaml.safe_load(path.read_text())["_target_"]
        assert option_name(group, target) == path.stem, path
        # a disaggregated summary names a pool's scheduler by its class alone
        assert option_name(group, target.rsplit(".", 1)[-1]) == path.stem, path


def test_a_class_no_option_builds_keeps_its_name_and_a_missing_one_is_a_dash():
    assert option_name("scheduler", "sim.scheduler.vllm.VLLMScheduler") == "vllm"  # old path
    assert option_name("scheduler", "my_package.MyScheduler") == "MyScheduler"
    assert option_name("router", None) == "-"
    assert option_name("no_such_group", "a.B") == "B"


def test_a_fleet_at_price_tiers_says_each_tier_and_the_list_it_came_from():
    config = {
        "hardware": {"name": "H100-SXM"},
        "cost": {
            "prices": {"H100-SXM": {"source": "Google Cloud Billing Catalog", "date": "2025"}}
        },
    }
    summary = {
        "cost": {
            "usd_per_gpu_hour": 6.2,
            "price_source": "fleet.tiers",
            "per_tier": {
                "reserved_3y": {"replicas": 2, "usd_per_gpu_hour": 4.858},
                "on_demand": {"replicas": 1, "usd_per_gpu_hour": 11.0612},
            },
        }
    }
    assert price_text(config, summary) == (
        "$6.20/GPU-hour on average (fleet.tiers): reserved_3y: 2 replica(s) at $4.86; "
        "on_demand: 1 replica(s) at $11.06; Google Cloud Billing Catalog, 2025"
    )
