"""A day plan's bill at price tiers (``sim.plan.day_tiers``): the day's commitments bought once
for every period, worked by hand; never above what the periods' own mixes cost together; each
candidate's commitments held apart (docs/how-to/plan-a-day.md)."""

from __future__ import annotations

import pytest

from sim.plan.day_tiers import cheapest_day_mix, tiered_day_bill
from sim.plan.settings import FaultsPlanConfig
from sim.plan.spares import Tier, probability_serving


def test_a_day_buys_its_commitments_once_for_every_period():
    """Worked by hand: reserved_3y at $5/h, down 1%; spot at $4/h, down 10%; 98.5% asked.
    Period A (12 h) needs 1 replica, B (12 h) 2. By the hour alone: A 2 spot (P = 0.99, $8/h),
    B 4 spot (P(>= 2 of 4) = 1 - 4 (0.001) 0.9 - 0.0001 = 0.9963, $16/h): $288/day. One
    reserved replica held all day ($120): A needs nothing more (P = 0.99), B 2 spot
    (P(>= 2 of 3) = 0.99 (0.81) + 0.01 (0.81) + 0.99 (2) (0.1) (0.9) = 0.9882; 1 spot gives
    0.891): $120 + 12 x $8 = $216. Two reserved: B needs 1 spot (0.99792): $240 + $48 = $288."""
    tiers = {"reserved_3y": Tier(5.0, 0.01), "spot": Tier(4.0, 0.1)}
    mix = cheapest_day_mix([(1, 12), (2, 12)], tiers, ["reserved_3y"], 0.985, 8)
    assert mix is not None
    assert mix.usd_per_day == pytest.approx(216.0)
    assert dict(mix.committed) == {"reserved_3y": 1}
    assert mix.by_period == [{"reserved_3y": 1}, {"reserved_3y": 1, "spot": 2}]
    # with no committed tier weighed, the hourly answer
    hourly = cheapest_day_mix(
        [(1, 12), (2, 12)], {"spot": tiers["spot"]}, ["reserved_3y"], 0.985, 8
    )
    assert hourly is not None and hourly.usd_per_day == pytest.approx(288.0)
    assert hourly.by_period == [{"spot": 2}, {"spot": 4}]


def test_the_day_bill_never_pays_idle_commitments_the_periods_alone_would():
    """experiments/faults/README.md's day at 20% of spot capacity reclaimed a month: each
    period alone buys spot except the peak (2 x reserved_3y + 6 x spot), so the periods'
    mixes together pay the 2 reserved all day and use them 6 h; bought for the day, every
    period uses them. The joint bill is never above the periods' own (the same commitments
    with each period's own mix is one of the joint search's answers), and each period's joint
    mix keeps N up at the target."""
    price = {"reserved_3y": 9.716, "on_demand": 22.1224, "spot": 8.849}
    up = {"reserved_3y": 0.9990409207161125, "on_demand": 0.9990409207161125}
    up["spot"] = 0.9926060773299691
    alone = [
        (1, 9, 4, {"spot": 5}),
        (9, 15, 7, {"reserved_3y": 2, "spot": 6}),
        (15, 19, 5, {"spot": 6}),
        (19, 1, 3, {"spot": 4}),
    ]
    chosen = [
        {
            "start_hour": start,
            "end_hour": end,
            "candidate": [],
            "load_replicas": needed,
            "by_tier": mix,
            "usd_per_hour": sum(price[t] * n for t, n in mix.items()),
            "replica_usd_per_hour": price,
            "replica_up_probability": up,
        }
        for start, end, needed, mix in alone
    ]
    faults = FaultsPlanConfig(availability=0.999)
    bill = tiered_day_bill(chosen, chosen[1], faults)
    assert bill is not None
    # alone: 2 reserved all day, the rest spot for its hours
    by_hand = 2 * 9.716 * 24 + 8.849 * (5 * 8 + 6 * 6 + 6 * 4 + 4 * 6)
    assert bill["periods_alone_usd_per_day"] == pytest.approx(by_hand)
    assert bill["seasonal_usd_per_day"] < by_hand
    assert bill["committed_replicas"] == {"reserved_3y": 2}
    for (_, _, needed, _), mix in zip(alone, bill["by_period"], strict=True):
        assert mix.get("reserved_3y") == 2
        us = [1 - up[t] for t, n in mix.items() for _ in range(n)]
        assert probability_serving(us, needed) >= 0.999
    assert bill["peak_usd_per_day"] == pytest.approx(24 * (2 * 9.716 + 6 * 8.849))
    # without a mix in every period (spares off, or out of reach somewhere): no such bill
    assert tiered_day_bill([chosen[0], {"start_hour": 9, "end_hour": 1}], chosen[0], faults) is None


def test_periods_of_different_candidates_hold_their_own_commitments():
    """Period A (8 h) on one GPU holds 3 reserved_3y replicas at $10/h, period B (16 h) on
    another 3 at $20/h: neither serves the other's, so each candidate's 3 are paid all day,
    3 x 10 x 24 + 3 x 20 x 24 = $2,160 (whichever period comes first), and no joint mix is
    searched across them."""
    up = {"reserved_3y": 0.999}
    a = {"start_hour": 0, "end_hour": 8, "candidate": ["hardware=h100_sxm"], "load_replicas": 2}
    a.update(by_tier={"reserved_3y": 3}, usd_per_hour=30.0)
    a.update(replica_usd_per_hour={"reserved_3y": 10.0}, replica_up_probability=up)
    b = {"start_hour": 8, "end_hour": 24, "candidate": ["hardware=h200"], "load_replicas": 2}
    b.update(by_tier={"reserved_3y": 3}, usd_per_hour=60.0)
    b.update(replica_usd_per_hour={"reserved_3y": 20.0}, replica_up_probability=up)
    faults = FaultsPlanConfig(availability=0.99)
    for order in ([a, b], [b, a]):
        bill = tiered_day_bill(order, b, faults)
        assert bill is not None
        assert bill["seasonal_usd_per_day"] == pytest.approx(2160.0)
        assert bill["committed_replicas"] == {"reserved_3y": 6}
