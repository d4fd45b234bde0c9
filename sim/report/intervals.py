"""How sure a report's figures are: an interval for a share, and one for a mean.

- A share of requests (SLO attainment: k of n requests met every bound) gets the Wilson score
  interval (Wilson 1927; Brown, Cai & DasGupta 2001 recommend it over the normal
  approximation, which leaves [0, 1] and covers badly near 0 and 1, where attainments sit). It
  treats the requests as independent trials, which they are not quite (a queue correlates
  neighbours), so read it as a lower bound on the uncertainty of one run.
- A mean over independent replications (a plan's $ per million tokens) gets the Student-t
  interval the planner gives its SLO statistics (``sim.plan.replications``), so a report's
  intervals and ``plan.json``'s are the same kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from sim.plan.replications import Statistic
from sim.plan.slo import Constraint
from sim.sweeps.monitor import slo_attainment

CONFIDENCE = 0.95  # the planner's default (plan.confidence)


@dataclass(frozen=True)
class Interval:
    """An estimate and its interval."""

    value: float
    low: float
    high: float


def wilson(successes: int, trials: int, confidence: float = CONFIDENCE) -> Interval | None:
    """The share ``successes / trials`` and its Wilson score interval; None for no trials."""
    if trials <= 0:
        return None
    assert 0 <= successes <= trials, f"successes={successes} outside [0, trials={trials}]"
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials))
    # at p = 0 or 1 the bound is exactly 0 or 1 (rounding would put it a hair outside)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(p, low, high)


def mean_interval(values: list[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The mean of ``values`` (independent replications) and its Student-t interval, as the
    planner computes it; None without values."""
    if not values:
        return None
    # the planner's Statistic needs a constraint; the interval does not depend on its bound
    found = Statistic(Constraint("value", "<=", math.inf), list(values)).interval(confidence)
    assert found is not None
    return Interval(*found)


def good_requests(summary: dict) -> tuple[int, int] | None:
    """(requests that met every SLO bound, requests): goodput x duration over every request,
    rejected and unfinished included, as the sweep ranks runs (``slo_attainment``); None
    without them."""
    share = slo_attainment(summary)
    if share is None:
        return None
    trials = int(summary["num_requests"])
    return round(share * trials), trials
