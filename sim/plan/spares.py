"""Spare replicas for failures (N + k): how many replicas beyond the N that the load needs keep
at least N serving with the probability a plan asks for, at given failure and repair rates, and
the cheapest mix of price tiers that does.

Each replica alternates between up and down. It goes down when any of its GPUs fails (a failed
GPU takes its whole tensor-parallel group with it, so a replica of ``gpus`` GPUs fails at
``gpus / gpu_mtbf_h`` per hour) or, on a spot tier, when its capacity is reclaimed; it is back
after a repair (mean ``repair_h``) or a replacement (mean ``reclaim_down_h``). With exponential
up times its long-run share of time down (unavailability) is

    u = (lambda R + rho T) / (1 + lambda R + rho T)

(``lambda``, ``rho``: failure and reclaim rates per hour; ``R``, ``T``: mean repair and
replacement hours), whatever the down times' distributions (an alternating renewal process:
mean down time over mean cycle). Replicas fail independently, so the number down at a random
instant is Poisson-binomial over their ``u`` (binomial when they are alike), computed exactly
here. A planned maintenance drain takes one replica at a time for a share ``m`` of the time:
then ``P(at least N up) = (1 - m) P_M + m P_(M-1)``.

Why the share of time in each state is computed rather than sampled: at published failure rates
(Meta's Llama 3 training run: 419 unexpected interruptions in 54 days on 16,384 H100s, about one
per 50,700 GPU-hours; Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783, 2024, section
3.3.4) a fleet of a few dozen GPUs loses a replica every few weeks, so a day's simulated fault
draws would almost never hold one, and replications could not resolve a probability of 0.999.
The latency at each replica count is the plan's own search; this module supplies the chance of
being at each count. What it leaves out: the seconds after a failure, while the failed replica's
requests are retried on the others (a fault simulation, ``faults.*``, shows them).

A plan (``plan.faults.availability``, docs/how-to/faults.md) takes each candidate's replica
as ``replica_tiers`` finds it in its composed config (its GPUs, each tier's price, the
failure, repair and spot reclaim rates) before its searches run, and ``spares_json`` answers
with the cheapest N + k once the faults-off search has found N.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.catalog.hardware import GPU
from sim.config.schema import CostConfig
from sim.config.validation import validate
from sim.errors import ConfigError, require
from sim.output.cost import gpu_price, tier_price

_SECONDS_PER_HOUR = 3600.0


def replica_unavailability(
    gpus: int,
    gpu_mtbf_h: float | None,
    repair_h: float,
    reclaim_per_h: float = 0.0,
    reclaim_down_h: float = 0.0,
) -> float:
    """One replica's long-run share of time down (the module's formula). ``gpu_mtbf_h`` None:
    GPUs that do not fail."""
    require(gpus >= 1, "gpus", gpus, "must be at least 1")
    require(gpu_mtbf_h is None or gpu_mtbf_h > 0, "faults.gpu_mtbf_h", gpu_mtbf_h, "must be > 0")
    require(repair_h >= 0, "faults.repair_h", repair_h, "must be >= 0")
    require(reclaim_per_h >= 0, "reclaim_per_h", reclaim_per_h, "must be >= 0")
    require(reclaim_down_h >= 0, "reclaim_down_h", reclaim_down_h, "must be >= 0")
    failure_per_h = 0.0 if gpu_mtbf_h is None else gpus / gpu_mtbf_h
    down = failure_per_h * repair_h + reclaim_per_h * reclaim_down_h
    return down / (1.0 + down)


def down_distribution(unavailability: Sequence[float]) -> list[float]:
    """P(exactly j replicas down), j = 0..len, for independent replicas each down with its
    probability (the Poisson-binomial distribution, by adding one replica at a time)."""
    probability = [1.0]
    for u in unavailability:
        require(0.0 <= u <= 1.0, "unavailability", u, "must be within [0, 1]")
        grown = [0.0] * (len(probability) + 1)
        for down, p in enumerate(probability):
            grown[down] += p * (1.0 - u)
            grown[down + 1] += p * u
        probability = grown
    return probability


def probability_serving(
    unavailability: Sequence[float], needed: int, maintenance_share: float = 0.0
) -> float:
    """P(at least ``needed`` replicas up), the replicas down independently with their
    ``unavailability``, and one at a time in planned maintenance for ``maintenance_share`` of
    the time (taken from the most available replicas: maintenance is scheduled onto healthy
    ones, and which one it is matters only to the order of the list)."""
    require(
        0.0 <= maintenance_share < 1.0,
        "maintenance_share",
        maintenance_share,
        "must be within [0, 1)",
    )

    def at_least(us: Sequence[float]) -> float:
        if needed <= 0:
            return 1.0
        if len(us) < needed:
            return 0.0
        return min(1.0, sum(down_distribution(us)[: len(us) - needed + 1]))

    whole = at_least(unavailability)
    if maintenance_share == 0.0 or not unavailability:
        return whole
    one_out = sorted(unavailability)[1:]
    return (1.0 - maintenance_share) * whole + maintenance_share * at_least(one_out)


@dataclass(frozen=True)
class Spares:
    """The fleet that keeps ``needed`` replicas serving: ``needed + spares`` replicas, of which
    ``by_tier`` per price tier where tiers were weighed, at ``usd_per_hour``; ``probability``
    that at least ``needed`` are up at a random instant, and ``without`` the same with no
    spares (``needed`` replicas only, the cheapest tier's)."""

    needed: int
    spares: int
    probability: float
    without: float
    by_tier: Mapping[str, int]
    usd_per_hour: float

    @property
    def replicas(self) -> int:
        return self.needed + self.spares


@dataclass(frozen=True)
class Tier:
    """A price tier's replica: its price per hour and its unavailability."""

    usd_per_hour: float
    unavailability: float


def cheapest_spares(
    needed: int,
    tiers: Mapping[str, Tier],
    target: float,
    max_spares: int = 64,
    maintenance_share: float = 0.0,
) -> Spares:
    """The cheapest fleet of ``needed`` + k replicas, each of one of ``tiers``, whose chance of
    keeping ``needed`` up is at least ``target``; ties go to fewer replicas, then to the order
    of ``tiers``. ConfigError where no fleet within ``max_spares`` spares reaches ``target``.

    Every mix of tiers up to ``needed + max_spares`` replicas is weighed (a replica's tier
    matters only through its price and its unavailability, so a mix is how many of each)."""
    require(needed >= 1, "needed", needed, "must be at least 1")
    require(0.0 < target < 1.0, "plan.faults.availability", target, "must be within (0, 1)")
    require(bool(tiers), "tiers", dict(tiers), "name at least one price tier")
    names = list(tiers)
    best: Spares | None = None
    for total in range(needed, needed + max_spares + 1):
        for counts in mixes(total, len(names)):
            us = [
                tiers[n].unavailability
                for n, c in zip(names, counts, strict=True)
                for _ in range(c)
            ]
            probability = probability_serving(us, needed, maintenance_share)
            if probability < target:
                continue
            cost = sum(tiers[n].usd_per_hour * c for n, c in zip(names, counts, strict=True))
            if best is None or cost < best.usd_per_hour - 1e-9:
                best = Spares(
                    needed=needed,
                    spares=total - needed,
                    probability=probability,
                    without=0.0,
                    by_tier={n: c for n, c in zip(names, counts, strict=True) if c},
                    usd_per_hour=cost,
                )
        # a larger fleet of the cheapest tier alone costs more than any fleet found so far once
        # its price passes the best: no mix of more replicas can be cheaper
        cheapest = min(t.usd_per_hour for t in tiers.values())
        if best is not None and cheapest * (total + 1) >= best.usd_per_hour - 1e-9:
            break
    if best is None:
        raise ConfigError(
            "plan.faults.availability",
            target,
            f"is not reached by {needed} + {max_spares} replicas at these failure rates",
        )
    # "with no spares": the load's N alone, bought at the cheapest tier (as a plan without
    # spares would buy it)
    first = tiers[min(tiers, key=lambda n: tiers[n].usd_per_hour)]
    without = probability_serving([first.unavailability] * needed, needed, maintenance_share)
    return Spares(
        needed=best.needed,
        spares=best.spares,
        probability=best.probability,
        without=without,
        by_tier=best.by_tier,
        usd_per_hour=best.usd_per_hour,
    )


def mixes(total: int, kinds: int) -> list[tuple[int, ...]]:
    """Every way to split ``total`` replicas among ``kinds`` tiers (counts in tier order)."""
    if kinds == 1:
        return [(total,)]
    return [
        (first, *rest) for first in range(total, -1, -1) for rest in mixes(total - first, kinds - 1)
    ]


# -- a plan's spares (plan.faults.*) ------------------------------------------------------------


def replica_tiers(cfg: Mapping[str, Any], tiers: Sequence[str] | None) -> dict[str, Any]:
    """A candidate's replica as its spares are weighed, from its composed config: its GPUs,
    the fault rates, and for each tier to mix (``tiers``; None: the run's own price, named by
    its tier, ``on_demand`` for the catalog's list price) its $/hour and its unavailability
    (``replica_unavailability``; a spot replica also down from a reclaim's notice,
    ``faults.spot_notice_s``, to its replacement, ``faults.spot_replace_s`` after the loss or
    ``faults.repair_h`` without one, at ``faults.spot_reclaims_per_h``). JSON-able (a plan's
    request file keeps it: its searches run where no config is composed). ConfigError without
    a GPU failure rate, for a fleet whose tiers are fixed (``fleet.tiers``) and for a
    disaggregated fleet."""
    faults = cfg.get("faults") or {}
    mtbf: float | None = faults.get("gpu_mtbf_h")
    require(
        bool(mtbf),
        "faults.gpu_mtbf_h",
        mtbf,
        "plan.faults.availability needs the GPUs' failure rate: give faults.gpu_mtbf_h "
        "(e.g. 50000, docs/how-to/faults.md)",
    )
    assert mtbf is not None  # (the require above)
    fleet = cfg["fleet"]
    require(
        not fleet.get("tiers"),
        "fleet.tiers",
        fleet.get("tiers"),
        "plan.faults.availability chooses the N + k replicas' tiers: give the tiers to mix as "
        "plan.faults.tiers",
    )
    mode = (cfg.get("placement") or {}).get("mode")
    require(
        mode != "disaggregated",
        "placement",
        mode,
        "plan.faults.availability plans the spares of a fleet of one pool",
    )
    gpus = int(fleet.get("tp", 1)) * int(fleet.get("pp", 1))
    repair_h = float(faults.get("repair_h", 4.0))
    # spot reclaims (faults.spot_reclaims_per_h, where the config has the key): the replica is
    # out from the notice (it takes no new requests) to the replacement
    reclaims = float(faults.get("spot_reclaims_per_h") or 0.0)
    replace_s = faults.get("spot_replace_s")
    reclaim_down_h = float(faults.get("spot_notice_s") or 0.0) / _SECONDS_PER_HOUR + (
        repair_h if replace_s is None else float(replace_s) / _SECONDS_PER_HOUR
    )
    gpu = GPU.from_config(cfg["hardware"])
    cost: CostConfig = validate(CostConfig, cfg.get("cost") or {}, "cost")
    if tiers is None:
        price, tier, _ = gpu_price(cost, gpu)
        prices = {tier or cost.tier or "on_demand": price}
    else:
        prices = {t: tier_price(cost, gpu, t, "plan.faults.tiers")[0] for t in tiers}
    return {
        "gpus_per_replica": gpus,
        "gpu_mtbf_h": float(mtbf),
        "repair_h": repair_h,
        "spot_reclaims_per_h": reclaims,
        "spot_down_h": reclaim_down_h,
        "tiers": {
            name: {
                "usd_per_hour": price * gpus,
                "unavailability": replica_unavailability(
                    gpus,
                    float(mtbf),
                    repair_h,
                    reclaims if name == "spot" else 0.0,
                    reclaim_down_h if name == "spot" else 0.0,
                ),
            }
            for name, price in prices.items()
        },
    }


def spares_json(
    needed: int, replica: Mapping[str, Any], availability: float, max_spares: int
) -> dict[str, Any]:
    """``plan.json``'s ``spares`` block of an answer whose load needs ``needed`` replicas:
    the availability asked and reached, each tier's replica up-probability, the spares, the
    cheapest tier mix and its $/hour, and the probability with no spares; a target out of
    reach within ``max_spares`` gives the reason instead (``refused``) and no spares."""
    tiers = {name: Tier(**t) for name, t in replica["tiers"].items()}
    out: dict[str, Any] = {
        "availability": availability,
        "replica_up_probability": {name: 1.0 - t.unavailability for name, t in tiers.items()},
        "replica_usd_per_hour": {name: t.usd_per_hour for name, t in tiers.items()},
        "gpus_per_replica": replica["gpus_per_replica"],
        "gpu_mtbf_h": replica["gpu_mtbf_h"],
        "repair_h": replica["repair_h"],
        "spot_reclaims_per_h": replica["spot_reclaims_per_h"],
    }
    try:
        found = cheapest_spares(needed, tiers, availability, max_spares)
    except ConfigError as err:
        return {**out, "spares": None, "refused": str(err)}
    return {
        **out,
        "spares": found.spares,
        "reached": found.probability,
        "without_spares": found.without,
        "without_spares_tier": min(tiers, key=lambda n: tiers[n].usd_per_hour),
        "by_tier": dict(found.by_tier),
        "usd_per_hour": found.usd_per_hour,
    }


def spares_text(load: int, block: Mapping[str, Any]) -> str:
    """``N = 3 for the load, k = 1 for failures at these rates: P(>= 3 up) = 0.999408 >=
    0.999 (with no spares 0.970299); 4 x on_demand, $11.96/hour``."""
    asked = block["availability"]
    if block.get("spares") is None:
        return f"N = {load} for the load; no k: {block.get('refused', '')}"
    mix = " + ".join(f"{n} x {tier}" for tier, n in block["by_tier"].items())
    # which tier "no spares" was bought at, where the mix could be of several
    tier = block.get("without_spares_tier")
    alone = f", {load} x {tier}" if tier and len(block["replica_up_probability"]) > 1 else ""
    return (
        f"N = {load} for the load, k = {block['spares']} for failures at these rates: "
        f"P(>= {load} up) = {block['reached']:.6f} >= {asked:g} (with no spares "
        f"{block['without_spares']:.6f}{alone}); {mix}, ${block['usd_per_hour']:,.2f}/hour"
    )
