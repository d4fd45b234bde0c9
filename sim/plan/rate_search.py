"""The highest arrival-rate multiple that meets the SLOs, by bracketing and bisection in ratio.

A fleet that meets its SLOs at a rate meets them at any lower one (the search assumes it, as
the fleet-size search assumes more replicas are never slower). From the config's own rate
(multiple 1) the multiples 2, 4, 8, ... are tried until one misses (or ``most``, tried last,
still meets: the capacity is above it), or, when 1 misses, 1/2, 1/4, ... until one meets (or
``least``, tried last, misses too: the SLO fails at the lowest rate tried). The bracket is then
bisected at its geometric mean, since a rate is a ratio scale: each step halves the bracket's
log-width, so a bracket of 2 is within ``tolerance`` in ``log2(ln 2 / ln(1 + tolerance))``
steps (about 6 for 2%).

Multiples are written with six significant digits (``canonical``): a multiple names a
simulation (``sim.arrival_rate_scale=K``), so two searches that reach the same multiple ask
for the same simulation and it runs once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# how the bracket ended (Bracket.outcome)
FOUND = "found"  # a multiple that meets and one within tolerance above it that misses
MISSES_AT_LOWEST = "misses_at_lowest"  # even ``least`` misses
MEETS_AT_HIGHEST = "meets_at_highest"  # even ``most`` meets


def canonical(k: float) -> float:
    """``k`` at six significant digits, as ``f"{k:g}"`` writes it in an override."""
    return float(f"{k:g}")


@dataclass(frozen=True)
class Bracket:
    """The search's end: the highest multiple that met (None: none did), the lowest above it
    that missed (None: none did), and which of the three ends it was."""

    meets: float | None
    misses: float | None
    outcome: str


def highest_meeting(
    ok: Callable[[float], bool], most: float, least: float, tolerance: float
) -> Bracket:
    """The highest rate multiple in ``[least, most]`` for which ``ok`` holds, bracketed from 1
    and bisected until the multiple that meets and the one that misses are within
    ``tolerance`` (relative) of each other (module docstring). ``ok`` is asked once per
    multiple, in canonical form. Needs ``least < 1 < most`` and ``tolerance >= 1e-3`` (six
    significant digits resolve it)."""
    assert least < 1 < most and tolerance >= 1e-3, (least, most, tolerance)
    answers: dict[float, bool] = {}

    def meets(k: float) -> bool:
        k = canonical(k)
        if k not in answers:
            answers[k] = ok(k)
        return answers[k]

    if meets(1.0):
        low, k = 1.0, 1.0
        while True:
            if k >= most:
                return Bracket(canonical(most), None, MEETS_AT_HIGHEST)
            k = canonical(min(2 * k, most))
            if not meets(k):
                high = k
                break
            low = k
    else:
        high, k = 1.0, 1.0
        while True:
            if k <= least:
                return Bracket(None, canonical(least), MISSES_AT_LOWEST)
            k = canonical(max(k / 2, least))
            if meets(k):
                low = k
                break
            high = k
    while high / low > 1 + tolerance:
        mid = canonical(math.sqrt(low * high))
        if mid in (low, high):  # (six digits cannot split it: within their resolution)
            break
        if meets(mid):
            low = mid
        else:
            high = mid
    return Bracket(low, high, FOUND)
