"""The smallest replica count that meets the SLOs, by bracketing and bisection.

More replicas never make a fleet slower (the search assumes it): counts 1, 2, 4, ... are tried
until one meets (or ``max_replicas``, tried last, does not: infeasible), then the gap between
the largest count that missed and the first that met is bisected. From a first guess (a
what-if next to a plan already found) the search gallops down or up from it (the guess, then
1, 2, 4, ... away): an answer at the guess or one above costs two evaluations.
``evaluate(count)`` is asked at most once per count (``ceil(log2(max)) + log2 of the gap``
counts in all), against ``max_replicas`` for a full grid.

A fleet may have a fewest count other than 1 (``lowest``: a disaggregated fleet of ``p``
prefill replicas needs ``p + 1``, one decode replica at least): the search then runs over
``lowest..max_replicas`` and never asks for a count below ``lowest``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

P = TypeVar("P")


def smallest_meeting(
    evaluate: Callable[[int], P],
    meets: Callable[[P], bool],
    max_replicas: int,
    start: int = 1,
    lowest: int = 1,
) -> tuple[int | None, dict[int, P]]:
    """(the smallest count in lowest..max_replicas whose point meets, or None; every point
    evaluated, by count). ``start``: a first guess (a nearby plan's answer): when it meets, the
    counts below it (down to ``lowest``) are bisected; when not, the doubling starts there.
    None without evaluating anything when ``lowest`` is above ``max_replicas``."""
    points: dict[int, P] = {}
    if lowest > max_replicas:
        return None, points

    def ok(count: int) -> bool:
        assert count >= lowest, f"count {count} below the fewest the fleet allows ({lowest})"
        if count not in points:
            points[count] = evaluate(count)
        return meets(points[count])

    start = min(max(start, lowest), max_replicas)
    # gallop away from the guess (steps 1, 2, 4, ...) until the answer is bracketed
    if ok(start):
        low, high, step = lowest - 1, start, 1
        while high - step >= lowest:
            if not ok(high - step):
                low = high - step
                break
            high, step = high - step, 2 * step
    else:
        low, step = start, 1
        while True:
            if low >= max_replicas:
                return None, points
            count = min(low + step, max_replicas)
            if ok(count):
                high = count
                break
            low, step = count, 2 * step
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    return high, points
