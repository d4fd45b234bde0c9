"""A plan's spares for failures (``plan.faults.*``, ``sim.plan.spares``): N from the faults-off
search, k and the cheapest tier mix from the failure rates, exactly, in plan.json, the printed
answer, the report's sentence and a day plan's periods (docs/how-to/faults.md)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.compose import compose_config
from sim.errors import ConfigError
from sim.plan.answer import ranked_table
from sim.plan.day import _settle, day_table
from sim.plan.day_tiers import tiered_day_bill
from sim.plan.planner import Prepared, prepare, run_plan
from sim.plan.searches import FAULTS_OFF
from sim.plan.settings import FaultsPlanConfig
from sim.plan.spares import (
    Tier,
    cheapest_spares,
    probability_serving,
    replica_tiers,
    spares_json,
    spares_text,
)
from sim.report.answer import plan_answer
from sim.report.costs import plan_costs
from sim.report.inputs import PlanInput, read_input, searched_replicas
from tests.plan.test_day import NIGHT_DAY, day_plan
from tests.scenarios import MD1_PLAN

# a GPU failing every 99 h, repaired in 1 h: a one-GPU replica is up 99 h of 100, u = 0.01
ONE_PERCENT = ["faults.gpu_mtbf_h=99", "faults.repair_h=1"]
GCP = {"reserved_3y": 4.858, "on_demand": 11.0612, "spot": 4.4245}  # configs/cost/gcp.yaml


def test_three_needed_at_one_percent_down_take_one_spare(tmp_path):
    """By hand: P(3 of 3 up) = 0.99^3 = 0.970299 < 0.999; P(>= 3 of 4 up) = 0.99^4 +
    4 (0.01) 0.99^3 = 0.96059601 + 0.03881196 = 0.99940797 >= 0.999: k = 1, four replicas at
    the H100's $2.99 (its hardware file's price), $11.96/hour."""
    folder, plan_json = run_plan(
        [*MD1_PLAN, *ONE_PERCENT, "plan.faults.availability=0.999", f"plan.output_dir={tmp_path}"],
        progress=False,
    )
    (answer,) = plan_json["candidates"]
    assert (answer["load_replicas"], answer["spare_replicas"], answer["replicas"]) == (3, 1, 4)
    spares = answer["spares"]
    assert spares["reached"] == pytest.approx(0.99940797, abs=1e-12)
    assert spares["without_spares"] == pytest.approx(0.970299, abs=1e-12)
    assert spares["replica_up_probability"] == {"on_demand": pytest.approx(0.99, abs=1e-12)}
    assert spares["by_tier"] == {"on_demand": 4}
    assert answer["usd_per_hour"] == pytest.approx(4 * 2.99) == spares["usd_per_hour"]
    # N is the faults-off search's: 2 replicas miss, 3 meet, and no simulation had faults
    # (a summary has a faults block only with them)
    decided = {p["replicas"]: p["decision"] for p in answer["evaluated"]}
    assert (decided[2], decided[3]) == ("misses", "meets")
    columns = pq.read_schema(Path(folder) / "plan.parquet").names
    assert not [name for name in columns if name.startswith("faults.")]
    given = [o for o in MD1_PLAN + ONE_PERCENT if "plan." not in o]
    assert plan_json["base_overrides"] == [*given, *FAULTS_OFF]  # (as simulated)
    assert "no faults" not in answer["whatifs"]
    line = (
        "N = 3 for the load, k = 1 for failures at these rates: P(>= 3 up) = 0.999408 >= 0.999 "
        "(with no spares 0.970299); 4 x on_demand, $11.96/hour"
    )
    assert line in ranked_table(plan_json)
    assert plan_answer(PlanInput(folder, plan_json, None, None), None).endswith(
        f"Spare capacity: {line}."
    )
    # the report finds N's simulations and bills them as N + k
    plan = read_input(Path(folder))
    assert isinstance(plan, PlanInput) and searched_replicas(answer) == 3
    chosen = plan.run(answer["overrides"], 3)
    assert chosen is not None and chosen.summary["num_replicas"] == 3
    (cost,) = plan_costs(plan.plan, plan.rows)
    assert (cost.replicas, cost.gpus, cost.usd_per_hour) == (4, 4, pytest.approx(11.96))
    assert cost.per_million is not None
    assert cost.per_million.value == pytest.approx(answer["usd_per_million_output_tokens"])


def test_the_replicas_tiers_travel_in_the_request_to_hydras_sweeper(tmp_path):
    """The searches run inside Hydra's sweeper, where no config is composed: each candidate's
    replica is found in prepare and kept in plan_request.json."""
    prepared = prepare(
        [*MD1_PLAN, *ONE_PERCENT, "plan.faults.availability=0.999", f"plan.output_dir={tmp_path}"]
    )
    request = json.loads(prepared.write().read_text())
    assert request["spares"][0]["tiers"]["on_demand"]["unavailability"] == pytest.approx(0.01)
    assert Prepared.read(tmp_path / Prepared.REQUEST_FILE).spares == prepared.spares


def test_the_feature_off_leaves_a_plan_as_it_was(tmp_path):
    """plan.faults.availability null (the default): the plan as before, no spares block."""
    _, plan_json = run_plan([*MD1_PLAN, f"plan.output_dir={tmp_path}"], progress=False)
    (answer,) = plan_json["candidates"]
    assert "spares" not in answer and "load_replicas" not in answer
    assert answer["replicas"] == 3 and answer["usd_per_hour"] == pytest.approx(3 * 2.99)


def _replica(*overrides: str, reclaims: float | None = None) -> dict:
    """A candidate's replica as a plan weighs its spares (``replica_tiers``), from a composed
    config; ``reclaims``: faults.spot_reclaims_per_h, read where the config has it."""
    cfg = compose_config(["cost=gcp", "hardware=h100_sxm", *overrides])
    if reclaims is not None:
        cfg["faults"] = {**cfg["faults"], "spot_reclaims_per_h": reclaims, "spot_replace_s": 600}
    return replica_tiers(cfg, ["reserved_3y", "on_demand", "spot"])


def test_a_tp2_replica_fails_twice_as_often_as_its_gpu():
    """TP2 at a GPU MTBF of 50,000 h (the Llama 3 run's rate) and 24 h to repair: a replica
    fails every 25,000 h and is down 24 h of 25,024; its tiers priced at the gcp list's
    $/GPU-hour times its two GPUs."""
    replica = _replica("fleet.tp=2", "faults.gpu_mtbf_h=50000", "faults.repair_h=24")
    assert replica["gpus_per_replica"] == 2
    for name, price in GCP.items():
        tier = replica["tiers"][name]
        assert tier["usd_per_hour"] == pytest.approx(2 * price)
        assert tier["unavailability"] == pytest.approx(24 / 25_024, rel=1e-12)


def test_spot_is_chosen_where_its_reclaims_leave_it_available_enough():
    """The cheapest mix for N = 3 at 0.999, against every mix enumerated by hand. Rare
    reclaims (one per 1,000 h, out 2 min of notice + 10 min to replace): spot, the cheapest
    tier, alone. Frequent ones (one per 2 h: a spot replica out a tenth of the time): the
    answer leans on three-year reservations and is still the cheapest mix there is."""
    for reclaims, all_spot in ((0.001, True), (0.5, False)):
        replica = _replica("faults.gpu_mtbf_h=50000", "faults.repair_h=24", reclaims=reclaims)
        block = spares_json(3, replica, 0.999, 8)
        tiers = replica["tiers"]
        best = math.inf
        for counts in itertools.product(range(12), repeat=3):
            mix = dict(zip(tiers, counts, strict=True))
            us = [tiers[n]["unavailability"] for n, c in mix.items() for _ in range(c)]
            if 3 <= sum(counts) <= 11 and probability_serving(us, 3) >= 0.999:
                best = min(best, sum(tiers[n]["usd_per_hour"] * c for n, c in mix.items()))
        assert block["usd_per_hour"] == pytest.approx(best)
        assert block["reached"] >= 0.999
        assert (block["by_tier"] == {"spot": 3 + block["spares"]}) is all_spot
        if not all_spot:
            assert block["by_tier"].get("reserved_3y", 0) >= 3
        # cheaper than the same count all on demand
        assert block["usd_per_hour"] < (3 + block["spares"]) * GCP["on_demand"]


@settings(max_examples=60, deadline=None)
@given(
    needed=st.integers(1, 30),
    u=st.floats(1e-5, 0.1),
    low=st.floats(0.5, 0.999),
    more=st.floats(0.0, 1.0),
)
def test_a_higher_availability_never_takes_fewer_spares_or_costs_less(needed, u, low, more):
    high = low + more * (0.99999 - low)
    tiers = {"on_demand": Tier(10.0, u / 4), "spot": Tier(4.0, u)}
    one = cheapest_spares(needed, tiers, low, max_spares=64)
    other = cheapest_spares(needed, tiers, high, max_spares=64)
    assert other.usd_per_hour >= one.usd_per_hour - 1e-9
    alike = {"od": Tier(1.0, u)}
    assert cheapest_spares(needed, alike, high).spares >= cheapest_spares(needed, alike, low).spares


def test_a_target_out_of_reach_answers_at_n_with_the_reason():
    replica = _replica("faults.gpu_mtbf_h=2", "faults.repair_h=2")  # up half the time
    block = spares_json(4, replica, 0.99999, 2)
    assert block["spares"] is None
    assert "is not reached by 4 + 2 replicas" in block["refused"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["plan.faults.availability=1.0"], r"plan.faults.availability.*1"),
        (["plan.faults.availability=0"], r"plan.faults.availability.*0"),
        (["plan.faults.availability=0.999"], r"faults.gpu_mtbf_h=None: plan.faults.availability"),
        (
            [*ONE_PERCENT, "plan.faults.availability=0.999", "plan.solve=max_rate"],
            r"plan.faults.availability=0.999: plan.solve=max_rate",
        ),
        (
            [*ONE_PERCENT, "plan.faults.availability=0.999", "cost=gcp", "hardware=a100_80g"]
            + ["plan.faults.tiers=[reserved, on_demand]"],
            r"plan.faults.tiers='reserved': the price list .* no reserved price for A100-80G",
        ),
        (
            [*ONE_PERCENT, "plan.faults.availability=0.999", "fleet.tiers={on_demand: rest}"],
            r"fleet.tiers=.*give the tiers to mix as plan.faults.tiers",
        ),
        (["plan.faults.tiers=[spot, spot]"], r"plan.faults.tiers.*name each price tier once"),
    ],
)
def test_bad_spare_settings_are_refused_in_one_line(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message) as err:
        prepare([*MD1_PLAN, f"plan.output_dir={tmp_path}", *extra])
    assert "\n" not in str(err.value)


# the day of tests/plan/test_day.py: each replica an M/D/1 queue; under a 30-ms mean TTFT the
# night (30 req/s) needs 1 replica and the day (90 req/s) 2


def test_a_day_plan_adds_each_periods_spares(tmp_path):
    """u = 0.05 (a GPU failing every 19 h, repaired in 1 h), asked 0.995. Night, N = 1:
    P(>= 1 of 2 up) = 1 - 0.05^2 = 0.9975: k = 1. Day, N = 2: P(>= 2 of 3) = 0.95^3 +
    3 (0.05) 0.95^2 = 0.99275 < 0.995; P(>= 2 of 4) = 1 - 4 (0.05^3) 0.95 - 0.05^4 =
    0.99951875: k = 2. The seasonal plan runs 2 replicas by night and 4 by day, faults off."""
    _, out = day_plan(
        tmp_path,
        NIGHT_DAY,
        "faults.gpu_mtbf_h=19",
        "faults.repair_h=1",
        "plan.faults.availability=0.995",
    )
    periods = {(p["start_hour"], p["end_hour"]): p for p in out["periods"]}
    split = {
        key: (p["load_replicas"], p["spare_replicas"], p["replicas"]) for key, p in periods.items()
    }
    assert split == {(20, 8): (1, 1, 2), (8, 20): (2, 2, 4)}
    seasonal = out["answers"]["seasonal"]
    assert "faults.gpu_mtbf_h=null" in seasonal["overrides"]
    assert seasonal["replicas_max"] == 4 and out["answers"]["peak"]["replicas_max"] == 4
    assert "(N = 2 + k = 2)" in day_table(out)
    assert "plan.faults.availability=0.995" in out["command"]
    # the day at the periods' mixes (the hardware file's $2.99 on demand): 12 h of 2
    # replicas and 12 h of 4, against the peak's 4 all day
    assert periods[20, 8]["by_tier"] == {"on_demand": 2}
    assert periods[8, 20]["by_tier"] == {"on_demand": 4}
    bill = out["tiered_bill"]
    assert bill["seasonal_usd_per_day"] == pytest.approx(12 * 2 * 2.99 + 12 * 4 * 2.99)
    assert bill["peak_usd_per_day"] == pytest.approx(24 * 4 * 2.99)
    assert bill["committed_replicas"] == {}
    assert bill["periods_alone_usd_per_day"] == bill["seasonal_usd_per_day"]
    assert "seasonal $215/day" in day_table(out)


def test_a_spot_reclaim_rate_weighs_the_spares_tiers_not_the_fleet_searched(tmp_path):
    """With spares computed, the searches run faults off, so a reclaim rate on a fleet that
    buys no spot is a rate of the spot tier weighed for the spares (taken), while a plain
    plan simulates it on the fleet, which has no spot replica to reclaim (refused)."""
    asked = [*MD1_PLAN, *ONE_PERCENT, "cost=gcp", "faults.spot_reclaims_per_h=0.01"]
    prepared = prepare(
        [
            *asked,
            "plan.faults.availability=0.999",
            "plan.faults.tiers=[on_demand, spot]",
            f"plan.output_dir={tmp_path / 'spared'}",
        ]
    )
    assert prepared.spares is not None
    (replica,) = prepared.spares
    assert replica["spot_reclaims_per_h"] == pytest.approx(0.01)
    assert (
        replica["tiers"]["spot"]["unavailability"] > replica["tiers"]["on_demand"]["unavailability"]
    )
    with pytest.raises(ConfigError, match="faults.spot_reclaims_per_h"):
        prepare([*asked, f"plan.output_dir={tmp_path / 'plain'}"])


def test_no_spares_names_the_tier_it_was_bought_at_when_several_are_weighed():
    """'with no spares' is N of the cheapest tier alone; with several tiers the sentence says
    which (GCP's spot here, its reclaims leaving it less available than on-demand)."""
    tiers = {"on_demand": Tier(11.0612, 0.001), "spot": Tier(4.4245, 0.01)}
    block = spares_json(
        2,
        {
            "tiers": {n: vars(t) for n, t in tiers.items()},
            "gpus_per_replica": 1,
            "gpu_mtbf_h": 999,
            "repair_h": 1,
            "spot_reclaims_per_h": 0.009,
        },
        0.999,
        8,
    )
    assert block["without_spares"] == pytest.approx(0.99**2, abs=1e-12)
    assert block["without_spares_tier"] == "spot"
    assert f"(with no spares {0.99**2:.6f}, 2 x spot)" in spares_text(2, block)


def test_a_day_plan_with_faults_simulated_settles_without_a_spares_block():
    """A day plan with faults on and no plan.faults.availability: each answer's k is
    simulated (load_replicas, spare_replicas, no spares block); its periods carry N and k, no
    tier mix, and the day has no tiered bill."""
    answer = {"overrides": [], "replicas": 3, "usd_per_hour": 8.97}
    answer.update(load_replicas=2, spare_replicas=1)
    entry = {"start_hour": 0, "end_hour": 24, "rate_rps": 1.0, "usd_per_hour": 8.97}
    entry["tied"] = [answer]
    peak = _settle([entry])
    assert (entry["load_replicas"], entry["spare_replicas"]) == (2, 1)
    assert "by_tier" not in entry
    assert tiered_day_bill([entry], peak, FaultsPlanConfig()) is None
