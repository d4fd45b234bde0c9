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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.errors import ConfigError, require


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
        for counts in _mixes(total, len(names)):
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
    first = min(tiers.values(), key=lambda t: t.usd_per_hour)
    without = probability_serving([first.unavailability] * needed, needed, maintenance_share)
    return Spares(
        needed=best.needed,
        spares=best.spares,
        probability=best.probability,
        without=without,
        by_tier=best.by_tier,
        usd_per_hour=best.usd_per_hour,
    )


def _mixes(total: int, kinds: int) -> list[tuple[int, ...]]:
    """Every way to split ``total`` replicas among ``kinds`` tiers (counts in tier order)."""
    if kinds == 1:
        return [(total,)]
    return [
        (first, *rest)
        for first in range(total, -1, -1)
        for rest in _mixes(total - first, kinds - 1)
    ]
