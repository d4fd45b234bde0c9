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

from sim.plan.replications import Statistic, wilson_interval
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
    found = wilson_interval(successes, trials, confidence)
    return None if found is None else Interval(*found)


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
