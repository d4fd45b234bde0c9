"""Events at absolute simulated times, in a fixed order when they coincide.

``env.timeout(t - env.now)`` lands on ``now + (t - now)``, which can differ from ``t`` in the
last bit of a float. Arrivals replayed from a trace and the end of a decode stretch must land
exactly where they belong, so they are scheduled at absolute times instead.

Events at the same time run in priority order: arrivals first, then the ends of steps, replica
by replica. SimPy would otherwise order them by when they were created, and a decode stretch
creates its end event long before stepping one by one would, so the two modes would disagree
whenever times coincide exactly (common with ``step_time=constant``).
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import NORMAL, EventPriority

ARRIVAL_PRIORITY = NORMAL  # SimPy's own URGENT (interrupts, the horizon) still comes first


def step_end_priority(replica_id: int) -> EventPriority:
    """Priority of a replica's step ends: after arrivals, lower replica ids first."""
    return EventPriority(ARRIVAL_PRIORITY + 1 + replica_id)


def timeout_at(
    env: simpy.Environment, time_s: float, priority: EventPriority = ARRIVAL_PRIORITY
) -> simpy.Event:
    """An event that fires at ``time_s`` (>= ``env.now``), before same-time events of a larger
    ``priority``."""
    assert time_s >= env.now, f"cannot schedule at {time_s} before now ({env.now})"
    event = simpy.Event(env)
    event._ok = True  # a triggered event, as Timeout makes itself; relies on SimPy 4 internals
    event._value = None
    heappush(env._queue, (time_s, priority, next(env._eid), event))
    return event
