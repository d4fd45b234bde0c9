"""Random spot reclaims (``faults.spot_reclaims_per_h``, ``sim.fleet.faults``): which replicas
are spot (``sim.deploy.tiers.spot_replicas``), a seeded run's reclaims against its stream's
draws, only spot replicas reclaimed, the refusal without one, reproducibility, a later start
(a replica that joins the fleet), and the count over a long run against renewal theory and
against its compensator (docs/how-to/price-tiers.md, "Simulate the reclaims").
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim import rng
from sim.config.faults import FaultsConfig
from sim.config.schema import validate_run
from sim.deploy.tiers import spot_replicas
from sim.errors import ConfigError
from sim.fleet.faults import FleetFaults
from sim.output.faults import FaultLog
from sim.run import simulate
from tests.fleet.test_faults import FLEET, _NoLoad, approx, fault_rows
from tests.support import columns, compose

HOUR_S = 3600.0


def _run_config(*overrides: str):
    return validate_run(compose(*overrides))


@pytest.mark.parametrize(
    ("overrides", "spot"),
    [
        ([], []),
        (["fleet.replicas=4", "cost.tier=spot"], [0, 1, 2, 3]),
        (["fleet.replicas=4", "cost.tier=reserved"], []),
        # the mix's order, by replica id; fleet.tiers beats cost.tier, as in the bill
        (["fleet.replicas=5", "fleet.tiers={reserved: 2, spot: 2, on_demand: rest}"], [2, 3]),
        (["fleet.replicas=3", "cost.tier=spot", "fleet.tiers={on_demand: 1, spot: 2}"], [1, 2]),
        # a disaggregated fleet: the prefill pool's replicas first; a pool without a mix on
        # demand, and cost.tier then not looked at
        (
            [
                "placement=disaggregated",
                "fleet.replicas=5",
                "placement.prefill.replicas=2",
                "placement.decode.tiers={spot: 2, on_demand: rest}",
                "cost.tier=spot",
            ],
            [2, 3],
        ),
        (
            [
                "placement=disaggregated",
                "fleet.replicas=4",
                "placement.prefill.tiers={spot: rest}",
                "placement.decode.tiers={on_demand: 1, spot: 2}",
            ],
            [0, 2, 3],
        ),
        (["placement=disaggregated", "fleet.replicas=3", "cost.tier=spot"], [0, 1, 2]),
    ],
    ids=[
        "none",
        "cost-tier",
        "cost-tier-reserved",
        "fleet-tiers",
        "tiers-beat-cost-tier",
        "decode-pool",
        "both-pools",
        "disaggregated-cost-tier",
    ],
)
def test_spot_replicas_are_those_the_bill_buys_spot(overrides, spot):
    assert spot_replicas(_run_config(*overrides)) == spot


SPOT_LAST = "fleet.tiers={on_demand: 3, spot: 1}"  # replica 3 is spot


def test_reclaims_at_the_streams_draws():
    """Seed 1, one reclaim every 4 s on average (900 per hour) of replica 3, a 0.5 s notice, a
    replacement 1 s after the loss. Its stream ``faults.reclaim.3`` draws notices at 3.484,
    6.511, 7.521, 8.459, 9.758, 9.948 and 17.315 s (to the ms): the first is reclaimed (lost
    at 3.984, back at 4.984), the second too (7.011, 8.011); 7.521 finds it draining and is
    none; 8.459 is reclaimed (8.959, 9.959), and 9.758 and 9.948 find it out again. The run's
    last request ends near 11 s, and with it the draws. Each reclaim is a scheduled one:
    nothing is routed to the replica from its notice until it is back."""
    result = simulate(
        compose(
            *FLEET,
            SPOT_LAST,
            "seed=1",
            "faults.spot_reclaims_per_h=900",
            "faults.spot_notice_s=0.5",
            "faults.spot_replace_s=1",
        )
    )
    req = columns(result.requests)
    end_s = float(np.nanmax(req["completion_time_s"]))
    notices = rng.stream(1, "faults.reclaim.3").exponential(4.0, size=20).cumsum()
    assert notices[6] > end_s > notices[5]
    expected, back_s = [], 0.0
    for at_s in notices[notices < end_s]:
        if at_s >= back_s:  # (a draw while it is draining or down is none)
            back_s = at_s + 0.5 + 1.0
            expected.append((3, "spot", at_s, at_s + 0.5, back_s))
    assert [round(e[2], 3) for e in expected] == [3.484, 6.511, 8.459]
    rows = fault_rows(result)
    assert [row[:5] for row in rows] == [
        (r, kind, approx(a), approx(d), approx(u)) for r, kind, a, d, u in expected
    ]
    arrival, replica = req["arrival_time_s"], req["replica_id"]
    for _, _, at_s, _, up_s in expected:
        assert 3 not in replica[(arrival >= at_s) & (arrival < up_s)]
    assert set(req["status"].tolist()) == {"completed"}  # (retried: on_failure=retry)
    faults = result.summary["faults"]
    assert faults["spot_reclaims"] == 3 and faults["spot_reclaims_per_h"] == 900
    assert faults["requests_retried"] == sum(row[5] for row in rows)


def test_only_spot_replicas_are_reclaimed_and_the_run_repeats():
    """Six replicas, the first two spot, reclaimed every 2 s on average: every event is on
    replica 0 or 1, and both are reclaimed; the same seed gives the same files, another seed
    other reclaims."""
    overrides = (
        *FLEET,
        "fleet.replicas=6",
        "fleet.tiers={spot: 2, on_demand: rest}",
        "faults.spot_reclaims_per_h=1800",
        "faults.spot_notice_s=0.2",
        "faults.spot_replace_s=0.5",
    )
    result = simulate(compose(*overrides))
    reclaimed = result.faults.column("replica_id").to_pylist()
    assert set(reclaimed) == {0, 1}
    assert set(result.faults.column("kind").to_pylist()) == {"spot"}
    again = simulate(compose(*overrides))
    assert again.faults.equals(result.faults) and again.requests.equals(result.requests)
    assert again.summary == result.summary
    other = simulate(compose(*overrides, "seed=5"))
    assert not other.faults.equals(result.faults)


def test_reclaims_without_a_spot_replica_are_refused():
    with pytest.raises(ConfigError) as refused:
        simulate(compose(*FLEET, "cost.tier=on_demand", "faults.spot_reclaims_per_h=0.5"))
    assert (refused.value.field, refused.value.value) == ("faults.spot_reclaims_per_h", 0.5)
    assert "\n" not in str(refused.value)


def test_reclaims_move_no_other_stream():
    """Random failures on four replicas, replica 0 also reclaimed now and then: the failures
    of replicas 1 to 3 are the same with the reclaims as without (their streams are their
    own, and nothing of replica 0 reaches them with no load)."""

    def events(config: FaultsConfig, spot: list[int]) -> list[tuple]:
        cluster = _NoLoad(4)
        log = FaultLog()
        FleetFaults(cluster, config, [1] * 4, 11, lambda i: [], log, spot=spot)
        cluster.env.run(until=2e4 * HOUR_S)
        return [(e.replica_id, e.kind, e.start_s, e.up_s) for e in log.events]

    plain = events(FaultsConfig(gpu_mtbf_h=500.0, repair_h=5.0), [])
    spot = events(FaultsConfig(gpu_mtbf_h=500.0, repair_h=5.0, spot_reclaims_per_h=0.01), [0])
    assert {e[1] for e in spot if e[0] == 0} == {"failure", "spot"}
    assert [e for e in spot if e[0] != 0] == [e for e in plain if e[0] != 0]
    assert len([e for e in plain if e[0] != 0]) > 50


def test_a_replica_that_joins_later_draws_from_then():
    """``start_spot_reclaims`` at 1000 s (a spot replica that becomes ready then): its notices
    are 1000 s plus its stream's draws, the first reclaim lost ``spot_notice_s`` later, and no
    replica replaced (``spot_replace_s`` null) comes back."""
    cluster = _NoLoad(2)
    log = FaultLog()
    config = FaultsConfig(spot_reclaims_per_h=36.0, spot_notice_s=30.0)  # every 100 s
    faults = FleetFaults(cluster, config, [1, 1], 4, lambda i: [], log)
    cluster.env.run(until=1000.0)
    assert log.events == []
    faults.start_spot_reclaims(1)
    cluster.env.run(until=1e5)
    first = 1000.0 + float(rng.stream(4, "faults.reclaim.1").exponential(100.0))
    assert [(e.replica_id, e.start_s, e.down_s, e.up_s) for e in log.events] == [
        (1, approx(first), approx(first + 30.0), None)
    ]
    assert faults.state(1) == "down" and faults.state(0) == "up"


def test_the_count_of_reclaims_matches_theory():
    """Four spot replicas, 0.01 reclaims per hour, a 120 s notice and a replacement 10 h after
    the loss, with no load, over 10^5 hours. A draw is none while the replica is out, so by
    memorylessness each replica's reclaims are a renewal process of cycles Exp(mean m = 100 h)
    + c (c = 10 h + 120 s): N over the four has mean 4 T / (m + c) and variance
    4 T m^2 / (m + c)^3 (renewal CLT), about 3635 +- 55 (the rate alone, 4 T / m = 4000, is
    6 sigma off). And, whatever the outages, the reclaims are a Poisson process in the time
    the replicas serve (U): N - U / m is within 4 sqrt(U / m) of 0. Each check at +-4 sigma:
    a false alarm about once in 16,000 seeds."""
    cluster = _NoLoad(4)
    log = FaultLog()
    config = FaultsConfig(spot_reclaims_per_h=0.01, spot_notice_s=120.0, spot_replace_s=36000.0)
    FleetFaults(cluster, config, [1] * 4, 2, lambda i: [], log, spot=[0, 1, 2, 3])
    horizon_s = 1e5 * HOUR_S
    cluster.env.run(until=horizon_s)
    count = sum(e.start_s <= horizon_s for e in log.events)
    m, c = 100.0 * HOUR_S, 36000.0 + 120.0
    mean = 4 * horizon_s / (m + c)
    sd = math.sqrt(4 * horizon_s * m**2 / (m + c) ** 3)
    assert abs(count - mean) <= 4 * sd, (count, mean, sd)
    serving_s = sum(
        horizon_s - sum(hi - lo for lo, hi in (span.within(0, horizon_s) for span in spans))
        for spans in log.out_intervals
    )
    expected = serving_s / m
    assert abs(count - expected) <= 4 * math.sqrt(expected), (count, expected)
