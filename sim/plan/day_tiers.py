"""A day plan's bill at price tiers, with spares (``plan.faults.*``).

Each period of a day plan buys its N + k at the cheapest mix of tiers for that period alone
(``sim.plan.spares``). A committed tier (``COMMITTED_TIERS``: reserved capacity) is paid every
hour of the day, whichever periods use it, so those mixes put together can pay for reserved
replicas that sit idle outside the peak. ``cheapest_day_mix`` buys the day's tiers together
instead: every count of committed replicas is tried, held all day, and each period completes
it by the hour. ``tiered_day_bill`` is ``day_plan.json``'s ``tiered_bill``
(docs/how-to/plan-a-day.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.plan.hourly import HOURS, period_length
from sim.plan.settings import FaultsPlanConfig
from sim.plan.spares import Tier, mixes, probability_serving

# tiers bought by commitment: paid every hour of the day, whichever periods use them
COMMITTED_TIERS = ("reserved", "reserved_3y")


def tiered_day_bill(
    chosen: list[dict[str, Any]], peak: dict[str, Any], faults: FaultsPlanConfig
) -> dict[str, Any] | None:
    """With spares (``plan.faults.availability``), the day's bill at price tiers, which the
    day's simulations (one price for the whole fleet) do not bill. A committed tier
    (``COMMITTED_TIERS``) is paid round the clock, so the seasonal plan's tiers are bought for
    the day together (``cheapest_day_mix``): the committed replicas held all day, each period
    completing them with on-demand and spot for its hours (``by_period``). Beside it, what
    the periods' own mixes, each the cheapest for its period alone, cost together (their
    committed replicas at the most any period holds, all day); and the peak period's mix all
    day. None without a mix in every period. With periods of different candidates (their
    replicas are not each other's, nor priced alike), the periods' own mixes are the answer,
    each candidate's commitments held all day."""
    periods = [p for p in chosen if p.get("by_tier")]
    if not periods or len(periods) != len(chosen) or "by_tier" not in peak:
        return None
    hours = [period_length(p["start_hour"], p["end_hour"]) for p in periods]
    # the periods' own mixes together: each candidate's committed replicas (its own
    # hardware, its own price) at the most any of its periods holds, all day
    alone = 0.0
    alone_committed: dict[str, int] = {}
    for candidate in {json.dumps(p["candidate"]) for p in periods}:
        group = [p for p in periods if json.dumps(p["candidate"]) == candidate]
        price = group[0]["replica_usd_per_hour"]
        for tier in COMMITTED_TIERS:
            held = max(p["by_tier"].get(tier, 0) for p in group)
            if held:
                alone += held * price[tier] * HOURS
                alone_committed[tier] = alone_committed.get(tier, 0) + held
    for p, h in zip(periods, hours, strict=True):
        alone += h * sum(
            n * p["replica_usd_per_hour"][t]
            for t, n in p["by_tier"].items()
            if t not in COMMITTED_TIERS
        )
    out: dict[str, Any] = {
        "seasonal_usd_per_day": alone,
        "committed_replicas": alone_committed,
        "by_period": [dict(p["by_tier"]) for p in periods],
        "periods_alone_usd_per_day": alone,
        "peak_usd_per_day": peak["usd_per_hour"] * HOURS,
        "peak_by_tier": peak["by_tier"],
    }
    if all(p["candidate"] == periods[0]["candidate"] for p in periods):
        price = periods[0]["replica_usd_per_hour"]
        up = periods[0]["replica_up_probability"]
        tiers = {t: Tier(price[t], 1.0 - up[t]) for t in price}
        needs = [(p["load_replicas"], h) for p, h in zip(periods, hours, strict=True)]
        assert faults.availability is not None
        mix = cheapest_day_mix(
            needs, tiers, COMMITTED_TIERS, faults.availability, faults.max_spares
        )
        # (on a tie, the joint mix: it shows every period using the commitments it pays)
        if mix is not None and mix.usd_per_day <= alone + 1e-9:
            out.update(
                seasonal_usd_per_day=mix.usd_per_day,
                committed_replicas=dict(mix.committed),
                by_period=mix.by_period,
            )
    return out


@dataclass(frozen=True)
class DayMix:
    """A day's fleets bought together: ``committed`` replicas per committed tier, held and paid
    all day, and each period's whole mix (``by_period``, the committed replicas included), at
    ``usd_per_day``."""

    committed: Mapping[str, int]
    by_period: list[dict[str, int]]
    usd_per_day: float


def cheapest_day_mix(
    periods: Sequence[tuple[int, float]],
    tiers: Mapping[str, Tier],
    committed_tiers: Sequence[str],
    target: float,
    max_spares: int,
) -> DayMix | None:
    """The cheapest way to keep each period's ``needed`` replicas serving with probability
    ``target`` (``periods``: each one's needed count and hours) when the ``committed_tiers``
    (reserved capacity) are bought for the whole day and the others by the hour: every count
    of committed replicas up to the largest period's ``needed + max_spares`` is tried, and each
    period completes it with the cheapest mix of the other tiers (``cheapest_spares``' rule,
    the committed replicas already there and already paid). None where some period cannot
    reach ``target`` within ``max_spares`` spares."""
    committed = [t for t in tiers if t in committed_tiers]
    hourly = [t for t in tiers if t not in committed_tiers]
    most = max(needed for needed, _ in periods) + max_spares
    best: DayMix | None = None
    for held in range(most + 1):
        if (
            best is not None
            and held * HOURS * min((tiers[t].usd_per_hour for t in committed), default=0.0)
            >= best.usd_per_day - 1e-9
        ):
            break  # more commitments alone cost more than the best day: none can be cheaper
        for counts in mixes(held, len(committed)) if committed else [()]:
            fixed = dict(zip(committed, counts, strict=True))
            base = [tiers[t].unavailability for t, c in fixed.items() for _ in range(c)]
            cost = HOURS * sum(tiers[t].usd_per_hour * c for t, c in fixed.items())
            if best is not None and cost >= best.usd_per_day - 1e-9:
                continue
            by_period = []
            for needed, hours in periods:
                extra = _cheapest_completion(base, needed, hourly, tiers, target, max_spares)
                if extra is None:
                    break
                cost += hours * sum(tiers[t].usd_per_hour * c for t, c in extra.items())
                by_period.append({t: c for t, c in {**fixed, **extra}.items() if c})
            else:
                if best is None or cost < best.usd_per_day - 1e-9:
                    best = DayMix({t: c for t, c in fixed.items() if c}, by_period, cost)
    return best


def _cheapest_completion(
    base: list[float],
    needed: int,
    hourly: Sequence[str],
    tiers: Mapping[str, Tier],
    target: float,
    max_spares: int,
) -> dict[str, int] | None:
    """The cheapest counts of the ``hourly`` tiers that, beside the replicas already held
    (their unavailabilities ``base``), keep ``needed`` up with probability ``target``, within
    ``needed + max_spares`` replicas in all; None if none does."""
    best: tuple[float, dict[str, int]] | None = None
    if probability_serving(base, needed) >= target:
        return {}
    cheapest = min((tiers[t].usd_per_hour for t in hourly), default=0.0)
    for total in range(1, needed + max_spares - len(base) + 1):
        if best is not None and cheapest * total >= best[0] - 1e-9:
            break  # every mix of this many hourly replicas costs more than the best
        for counts in mixes(total, len(hourly)) if hourly else []:
            us = [
                *base,
                *(
                    tiers[t].unavailability
                    for t, c in zip(hourly, counts, strict=True)
                    for _ in range(c)
                ),
            ]
            if probability_serving(us, needed) < target:
                continue
            price = sum(tiers[t].usd_per_hour * c for t, c in zip(hourly, counts, strict=True))
            if best is None or price < best[0] - 1e-9:
                best = (price, dict(zip(hourly, counts, strict=True)))
    return None if best is None else best[1]


def tiered_bill_text(bill: dict[str, Any], periods: list[dict[str, Any]]) -> str:
    """``tiered_bill``'s printed line: the seasonal day at its tiers, each period's mix, the
    periods' own mixes together, the peak's."""
    committed = ", ".join(f"{n} x {tier}" for tier, n in bill["committed_replicas"].items())
    by_period = "; ".join(
        f"{p['start_hour']:02d}-{p['end_hour']:02d} h "
        + " + ".join(f"{n} x {tier}" for tier, n in mix.items())
        for p, mix in zip(periods, bill["by_period"], strict=True)
    )
    return (
        "at the spares' price tiers (the simulated days above bill one price): seasonal "
        f"${bill['seasonal_usd_per_day']:,.0f}/day"
        + (f" ({committed} committed all day)" if committed else "")
        + f" [{by_period}]; each period's cheapest mix alone "
        f"${bill['periods_alone_usd_per_day']:,.0f}/day; peak "
        f"${bill['peak_usd_per_day']:,.0f}/day ("
        + " + ".join(f"{n} x {tier}" for tier, n in bill["peak_by_tier"].items())
        + ")"
    )
