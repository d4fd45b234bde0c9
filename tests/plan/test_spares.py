"""Spare replicas for failures (sim/plan/spares.py): the unavailability of a replica, the
distribution of replicas down, and the fewest (or cheapest) spares, against hand calculations
and brute force."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binom

from sim.errors import ConfigError
from sim.plan.spares import (
    Tier,
    cheapest_spares,
    down_distribution,
    probability_serving,
    replica_unavailability,
)


def test_a_replica_fails_when_any_of_its_gpus_does():
    # 8 GPUs at 80,000 h each: a failure per 10,000 h; 10 h to repair: down 10 h of 10,010
    assert replica_unavailability(8, 80_000.0, 10.0) == pytest.approx(10 / 10_010, rel=1e-12)
    assert replica_unavailability(1, 80_000.0, 10.0) == pytest.approx(10 / 80_010, rel=1e-12)
    assert replica_unavailability(4, None, 10.0) == 0.0  # GPUs that never fail


def test_reclaims_add_their_own_down_time():
    # failures 1/1000 h for 10 h, reclaims 1/100 h for 2 h: a mean cycle's down share is
    # (0.01 + 0.02) / (1 + 0.01 + 0.02)
    u = replica_unavailability(1, 1_000.0, 10.0, reclaim_per_h=0.01, reclaim_down_h=2.0)
    assert u == pytest.approx(0.03 / 1.03, rel=1e-12)


def test_alike_replicas_are_binomial():
    dist = down_distribution([0.07] * 9)
    assert dist == pytest.approx([binom.pmf(j, 9, 0.07) for j in range(10)], rel=1e-12)


@given(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=7))
def test_unlike_replicas_match_every_state_enumerated(us):
    brute = [0.0] * (len(us) + 1)
    for state in itertools.product((False, True), repeat=len(us)):
        p = math.prod(u if down else 1.0 - u for u, down in zip(us, state, strict=True))
        brute[sum(state)] += p
    assert down_distribution(us) == pytest.approx(brute, abs=1e-12)


def test_six_needed_at_one_percent_down_take_two_spares_for_three_nines():
    # by hand, u = 0.01: 6 replicas 0.99^6 = 0.94148; 7: 0.99^7 + 7(0.01)0.99^6 = 0.99797;
    # 8: 0.99^8 + 8(0.01)0.99^7 + 28(0.0001)0.99^6 = 0.99995
    alike = {"on_demand": Tier(usd_per_hour=1.0, unavailability=0.01)}
    answer = cheapest_spares(6, alike, target=0.999)
    assert (answer.needed, answer.spares, answer.replicas) == (6, 2, 8)
    assert answer.probability == pytest.approx(0.99995, abs=5e-6)
    assert answer.without == pytest.approx(0.99**6, rel=1e-12)
    assert answer.by_tier == {"on_demand": 8} and answer.usd_per_hour == 8.0
    assert cheapest_spares(6, alike, target=0.99).spares == 1  # 0.99797 is enough


def test_maintenance_takes_one_replica_out_for_its_share_of_the_time():
    us = [0.01] * 7
    m = 0.05
    expected = (1 - m) * probability_serving(us, 6) + m * probability_serving(us[:6], 6)
    assert probability_serving(us, 6, maintenance_share=m) == pytest.approx(expected, rel=1e-12)
    assert probability_serving(us[:6], 6) == pytest.approx(0.99**6, rel=1e-12)


def test_spot_replicas_join_the_mix_where_their_risk_is_worth_their_price():
    tiers = {
        "on_demand": Tier(usd_per_hour=10.0, unavailability=0.001),
        "spot": Tier(usd_per_hour=4.0, unavailability=0.05),
    }
    answer = cheapest_spares(4, tiers, target=0.99)
    # brute force over every mix of up to 10 replicas
    best = None
    for od in range(11):
        for spot in range(11 - od):
            us = [0.001] * od + [0.05] * spot
            if od + spot >= 4 and probability_serving(us, 4) >= 0.99:
                cost = 10.0 * od + 4.0 * spot
                best = cost if best is None else min(best, cost)
    assert answer.usd_per_hour == pytest.approx(best)
    assert answer.by_tier.get("spot", 0) > 0  # cheaper with spot than all on demand (40 + spares)
    assert answer.probability >= 0.99


@given(
    needed=st.integers(1, 12),
    u=st.floats(1e-5, 0.2),
    worse=st.floats(1.0, 5.0),
    target=st.sampled_from([0.9, 0.99, 0.999, 0.9999]),
)
def test_less_reliable_gpus_never_need_fewer_spares(needed, u, worse, target):
    reliable = cheapest_spares(needed, {"od": Tier(1.0, u)}, target)
    flaky = cheapest_spares(needed, {"od": Tier(1.0, min(0.5, u * worse))}, target)
    assert flaky.spares >= reliable.spares


def test_a_target_out_of_reach_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"plan.faults.availability=0.999999: is not reached"):
        cheapest_spares(4, {"od": Tier(1.0, 0.5)}, target=0.999999, max_spares=3)
    with pytest.raises(ConfigError, match=r"faults.gpu_mtbf_h=0.0: must be > 0"):
        replica_unavailability(8, 0.0, 1.0)
