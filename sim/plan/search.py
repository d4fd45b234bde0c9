"""The smallest replica count that meets the SLOs, by bracketing and bisection.

More replicas never make a fleet slower (the search assumes it): counts 1, 2, 4, ... are tried
until one meets (or ``max_replicas``, tried last, does not: infeasible), then the gap between
the largest count that missed and the first that met is bisected. ``evaluate(count)`` is asked
at most once per count (``ceil(log2(max)) + log2 of the gap`` counts in all), against
``max_replicas`` for a full grid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

P = TypeVar("P")


def smallest_meeting(
    evaluate: Callable[[int], P], meets: Callable[[P], bool], max_replicas: int
) -> tuple[int | None, dict[int, P]]:
    """(the smallest count in 1..max_replicas whose point meets, or None; every point
    evaluated, by count)."""
    points: dict[int, P] = {}

    def ok(count: int) -> bool:
        if count not in points:
            points[count] = evaluate(count)
        return meets(points[count])

    low, count = 0, 1  # low: the largest count known to miss
    while not ok(count):
        low = count
        if count >= max_replicas:
            return None, points
        count = min(2 * count, max_replicas)
    high = count
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    return high, points
