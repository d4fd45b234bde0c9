"""Independent replications of one point of a plan, and what they say about the SLOs.

A point (a candidate deployment at a replica count) is simulated under seeds ``seed, seed + 1,
...``; the same seeds for every point and candidate (common random numbers), so two points
differ by their fleet, not by their traffic's luck. For each SLO statistic the replications
give a mean and a ``confidence`` interval (Student's t on the replication means: ``mean +-
t(1 - (1 - confidence) / 2, R - 1) x s / sqrt(R)``, the standard interval for a mean over
independent replications, Law & Kelton ch. 9).

The decision at a point:

- ``misses`` as soon as a replication is grossly ``unstable`` (it served under half of what
  arrived: no count of replications makes its latencies usable), or some statistic's whole
  interval is on the wrong side of its bound;
- ``meets`` when every statistic's whole interval is on the right side, unless half or more
  of the replications were not ``stable`` (``unstable``, ``undetermined`` or
  ``near_saturation``: latencies that depend on the run's length; a short run near capacity
  is called one of these by chance now and then, so one replication does not decide);
- otherwise undecided: one more replication, up to ``max_replications``, where the means
  decide.

Two identical replications mean nothing in the run is random (a trace replayed with a
deterministic router): the decision is taken on them, and the intervals have no width.

A count that meets by its intervals but whose replications so far missed an SLO more often
than ``max_miss_probability`` allows (``plan.max_miss_probability``) gets more replications, up
to the cap; it misses if the share is still above the allowance there, so the plan never
answers with a count that misses more often than it says it may.

``miss_probability`` is the share of replications in which some SLO was missed (the chance
that a run like these misses), with its replication count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from sim.plan.slo import Constraint


def wilson_interval(
    successes: int, trials: int, confidence: float = 0.95
) -> tuple[float, float, float] | None:
    """The share ``successes / trials`` and its Wilson score interval (Wilson 1927): the
    interval of a proportion that stays within [0, 1] and is not empty at 0 or all; None for
    no trials."""
    if trials <= 0:
        return None
    assert 0 <= successes <= trials, f"successes={successes} outside [0, trials={trials}]"
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials))
    # at p = 0 or 1 the bound is exactly 0 or 1 (rounding would put it a hair outside)
    low = 0.0 if successes == 0 else max(0.0, min(p, centre - half))
    high = 1.0 if successes == trials else min(1.0, max(p, centre + half))
    return p, low, high


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom, else the Cornish-Fisher
    expansion around the normal quantile (Abramowitz & Stegun 26.7.5), within 0.12% of the
    exact 97.5% quantile from 3 degrees of freedom on (0.8% at 99.5%). No SciPy, so the
    planner runs on the core install."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def t_interval(xs: list[float], confidence: float) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval of the mean of independent replications'
    values ``xs`` (module docstring); one value: an interval of no width around it."""
    n = len(xs)
    assert n > 0, "no values"
    mean = sum(xs) / n
    if n == 1:
        return mean, mean, mean
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(1 - (1 - confidence) / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass
class Statistic:
    """One SLO statistic over the replications."""

    constraint: Constraint
    values: list[float | None] = field(default_factory=list)

    def interval(self, confidence: float) -> tuple[float, float, float] | None:
        """(mean, low, high); None while a replication lacks the statistic. One replication:
        an interval of no width around it."""
        if not self.values or any(v is None for v in self.values):
            return None
        return t_interval([float(v) for v in self.values if v is not None], confidence)

    def side(self, confidence: float) -> str:
        """``meets`` / ``misses`` when the whole interval is on one side, else ``unsure``."""
        found = self.interval(confidence)
        if found is None:
            return "misses"
        _, low, high = found
        worst, best = (high, low) if self.constraint.op == "<=" else (low, high)
        if self.constraint.met_by(worst):
            return "meets"
        if not self.constraint.met_by(best):
            return "misses"
        return "unsure"


def missed_share(statistics: list[Statistic]) -> float:
    """The share of replications in which some statistic missed its bound."""
    count = len(statistics[0].values) if statistics else 0
    missed = sum(
        any(not s.constraint.met_by(s.values[i]) for s in statistics) for i in range(count)
    )
    return missed / count if count else 0.0


@dataclass
class Point:
    """A candidate at a replica count: its replications and the decision they support."""

    replicas: int
    summaries: list[dict[str, Any]]
    statistics: list[Statistic]
    decision: str  # meets | misses
    reason: str

    @property
    def replications(self) -> int:
        return len(self.summaries)

    @property
    def miss_probability(self) -> float:
        return missed_share(self.statistics)


def evaluate(
    replicas: int,
    run: Callable[[int], dict[str, Any]],
    constraints: list[Constraint],
    *,
    min_replications: int,
    max_replications: int,
    confidence: float,
    max_miss_probability: float = 1.0,
    fetch: Callable[[list[int]], list[dict[str, Any]]] | None = None,
) -> Point:
    """Replicate ``run(replication)`` (a summary) until the decision is clear (module
    docstring). With ``fetch`` (the summaries of several replications at once), the first
    two are asked for together, then the rest of the first ``min_replications``, so they can
    run in parallel."""
    summaries: list[dict[str, Any]] = []
    statistics = [Statistic(c) for c in constraints]

    def done(decision: str, reason: str) -> Point:
        point = Point(replicas, summaries, statistics, decision, reason)
        unstable = sum(unusable(s) for s in summaries)
        if decision == "meets" and 2 * unstable >= len(summaries):
            point.decision = "misses"
            point.reason = f"not stable in {unstable} of {len(summaries)} replications"
        elif decision == "meets" and point.miss_probability > max_miss_probability:
            point.decision = "misses"
            point.reason = (
                f"an SLO missed in {point.miss_probability:.0%} of {len(summaries)} "
                f"replications, above plan.max_miss_probability={max_miss_probability:g}"
            )
        return point

    while True:
        first = len(summaries)
        if fetch is not None and first < min_replications:
            # two first: when they are identical (nothing random), they are all there is
            upto = min(2, min_replications) if first == 0 else min_replications
            batch = fetch(list(range(first, upto)))
        else:
            batch = [run(first)]
        summaries.extend(batch)
        for summary in batch:
            for s in statistics:
                s.values.append(s.constraint.value(summary))
        if any(_grossly_unstable(summary) for summary in batch):
            # half of what arrives is left; no replication changes that
            return Point(replicas, summaries, statistics, "misses", "unstable")
        if len(summaries) >= 2 and first <= 1 and summaries[0] == summaries[1]:
            # a replay with no randomness (a trace, no random router): more seeds add nothing
            ok = all(s.constraint.met_by(s.values[0]) for s in statistics)
            return done(
                "meets" if ok else "misses",
                "identical replications (nothing random in the run): decided on one",
            )
        if len(summaries) < min_replications:
            continue
        sides = [s.side(confidence) for s in statistics]
        if "misses" in sides:
            missed = statistics[sides.index("misses")].constraint
            return done("misses", f"{missed} missed")
        if all(side == "meets" for side in sides):
            if (
                missed_share(statistics) <= max_miss_probability
                or len(summaries) >= max_replications
            ):
                return done("meets", "every SLO met")
            # the intervals clear, but too many replications missed so far: more decide
        if len(summaries) >= max_replications:
            means = [s.interval(confidence) for s in statistics]
            ok = all(
                m is not None and s.constraint.met_by(m[0])
                for s, m in zip(statistics, means, strict=True)
            )
            return done(
                "meets" if ok else "misses",
                f"undecided after {len(summaries)} replications: by the means",
            )


def _grossly_unstable(summary: dict[str, Any]) -> bool:
    """``unstable`` with under half of what arrived served."""
    stability = summary.get("stability") or {}
    share = stability.get("served_share")
    return stability.get("verdict") == "unstable" and share is not None and share < 0.5


def unusable(summary: dict[str, Any]) -> bool:
    """A replication whose latencies are not a steady state's (``sim.output.stability``)."""
    verdict = (summary.get("stability") or {}).get("verdict")
    return verdict in ("unstable", "undetermined", "near_saturation")
